//! graft-driver's own trouble as Warning Events on its Node: devices.toml refused
//! (`DeviceConfigInvalid`, after an edit and at start-up), the checkpoint rebuilt
//! (`CheckpointRebuilt`), graft-hook not installed (`HookInstallFailed`).

use std::time::{Duration, Instant};

use anyhow::ensure;
use graft_integration::claims::{claim_with_pod, namespace, uid};
use graft_integration::dra_node::{prepare, DraNode, DRIVER_NAME};

use super::{cp, events, DEVICES, WAIT};

/// Waits for a `reason` Event on Node `node` whose note contains `part`; returns the note.
async fn wait_node_note(
    c: &kube::Client,
    node: &str,
    reason: &str,
    part: &str,
) -> anyhow::Result<String> {
    let until = Instant::now() + WAIT;
    loop {
        for ev in events(c, "", node, reason).await? {
            let note = ev.note.clone().unwrap_or_default();
            if note.contains(part) {
                ensure!(ev.type_.as_deref() == Some("Warning"), "{ev:?}");
                let r = ev.regarding.as_ref();
                ensure!(r.and_then(|r| r.kind.as_deref()) == Some("Node"), "{ev:?}");
                println!("{reason} on node {node}: {note}");
                return Ok(note);
            }
        }
        ensure!(
            Instant::now() < until,
            "no {reason} Event saying {part:?} on node {node} within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_devices_toml_posts_device_config_invalid() -> anyhow::Result<()> {
    let mut node = DraNode::start(cp(), "node-evt-cfg", DEVICES).await?;
    let c = node.client.clone();
    // An edit breaks it (line 4): the last devices stay, the Node says why.
    std::fs::write(node.path("devices.toml"), format!("{DEVICES}bogus = 1\n"))?;
    let note = wait_node_note(&c, "node-evt-cfg", "DeviceConfigInvalid", "keeps its last").await?;
    ensure!(
        note.contains("devices.toml") && note.contains("line 5") && note.contains("bogus"),
        "{note}"
    );
    ensure!(node.driver.pid().is_some());
    // A start with it: the process ends, after saying so on the Node.
    node.driver.kill9()?;
    node.driver.spawn(None)?;
    let st = node.driver.wait_exit(WAIT)?;
    ensure!(!st.success(), "{st}");
    let note = wait_node_note(&c, "node-evt-cfg", "DeviceConfigInvalid", "cannot start").await?;
    ensure!(note.contains("bogus"), "{note}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_checkpoint_posts_checkpoint_rebuilt() -> anyhow::Result<()> {
    let mut node = DraNode::start(cp(), "node-evt-ckpt", DEVICES).await?;
    let c = node.client.clone();
    namespace(&c, "evt-ckpt").await?;
    let (_, claim) = claim_with_pod(&c, "evt-ckpt", "kept", "node-evt-ckpt", "null").await?;
    ensure!(prepare(&node, &[&claim]).await?[&uid(&claim)]
        .error
        .is_empty());
    node.driver.kill9()?;
    for slot in node.checkpoint_slots() {
        if slot.exists() {
            std::fs::write(&slot, b"{\"torn")?;
        }
    }
    node.restart_driver(None).await?;
    let note = wait_node_note(
        &c,
        "node-evt-ckpt",
        "CheckpointRebuilt",
        "failed its checks",
    )
    .await?;
    ensure!(
        note.contains("1 claim(s) kept") && note.contains("corrupt"),
        "{note}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_hook_install_posts_hook_install_failed() -> anyhow::Result<()> {
    use graft_integration::driver::{DriverOpts, GraftDriver};
    use graft_integration::fake_gpu::FakeNode;
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::Builder::new().prefix("gdh").tempdir_in("/tmp")?;
    let fake = FakeNode::create(dir.path())?;
    // A script, not a static executable: graft-hook must run in every container.
    let source = dir.path().join("not-static");
    std::fs::write(&source, "#!/bin/sh\nexit 0\n")?;
    std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o755))?;
    let config = dir.path().join("devices.toml");
    std::fs::write(&config, DEVICES)?;
    let boot_id_path = dir.path().join("boot_id");
    std::fs::write(
        &boot_id_path,
        std::fs::read_to_string(graft_record::BOOT_ID_PATH)?,
    )?;
    let mut driver = GraftDriver::start(DriverOpts {
        driver_name: DRIVER_NAME.into(),
        node_name: "node-evt-hook".into(),
        kubelet_dir: dir.path().join("kubelet"),
        state_dir: dir.path().join("state"),
        device_config: config,
        boot_id_path,
        kubeconfig: cp().kubeconfig.clone(),
        pod_uid: None,
        log: dir.path().join("graft-driver.log"),
        extra: [vec!["--discovery".into(), "char,nvidia".into()], {
            fake.nvidia_args(&dir.path().join("bin/graft-hook"), &source)
        }]
        .concat(),
        binary: None,
    })?;
    let st = driver.wait_exit(WAIT)?;
    ensure!(!st.success(), "{st}");
    let c = cp().client().await?;
    let note = wait_node_note(&c, "node-evt-hook", "HookInstallFailed", "graft-hook").await?;
    ensure!(
        note.contains("not a static executable") && note.contains("cannot start"),
        "{note}\n{}",
        driver.log_text()
    );
    Ok(())
}
