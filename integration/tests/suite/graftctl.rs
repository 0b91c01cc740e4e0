//! graftctl against a real containerd with graft-nri: a recorded claim, a container graft
//! injected into, and the device snapshot graft-driver leaves; then hostile state files.
//!
//! Needs the testbed (`integration/testbed/setup.sh`) and the workspace binaries
//! (`cargo build --workspace --bins`).

mod kubectl_graft;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use graft_integration::mounts::Scratch;
use graft_integration::records::{char_node, one_device_claim};
use graft_integration::testbed::workspace_bin;
use graft_integration::{Containerd, Cri, GraftNri, Testbed, Version};
use graft_record::devices::{
    write_snapshot, DeviceSnapshot, NodeId, PublishedDevice, DEVICES_VERSION,
};
use graft_record::*;
use nix::sys::stat::{major, minor};
use serde_json::Value;

const LONG: Duration = Duration::from_secs(60);

/// Runs graftctl on `state`; (success, stdout, stderr).
fn graftctl(state: &Path, args: &[&str]) -> anyhow::Result<(bool, String, String)> {
    let out = Command::new(workspace_bin("graftctl")?)
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .output()
        .context("running graftctl")?;
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    println!("$ graftctl {}\n{o}{e}", args.join(" "));
    Ok((out.status.success(), o, e))
}

fn ok(state: &Path, args: &[&str]) -> anyhow::Result<String> {
    let (success, out, err) = graftctl(state, args)?;
    ensure!(success, "graftctl {args:?} failed: {err}");
    Ok(out)
}

fn json(state: &Path, args: &[&str]) -> anyhow::Result<Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&ok(state, &all)?).context("graftctl -o json is not JSON")
}

fn refused(state: &Path, args: &[&str], needles: &[&str]) -> anyhow::Result<()> {
    let (success, _, err) = graftctl(state, args)?;
    ensure!(!success, "graftctl {args:?} must fail");
    ensure!(needles.iter().all(|n| err.contains(n)), "{args:?}: {err}");
    Ok(())
}

/// `nodes`: what graft-nri then lets testdev-0's records give a container.
fn snapshot(pool: &str, nodes: &[graft_record::DeviceNode]) -> DeviceSnapshot {
    DeviceSnapshot {
        version: DEVICES_VERSION,
        driver: "graft.dev".into(),
        node: pool.into(),
        driver_version: "test".into(),
        pid: std::process::id(),
        updated_ms: 1,
        devices: vec![PublishedDevice {
            name: "testdev-0".into(),
            pool: pool.into(),
            kind: "test".into(),
            attributes: BTreeMap::from([
                ("type".into(), "test".into()),
                ("path".into(), "/dev/cpu_dma_latency".into()),
            ]),
            device_nodes: vec!["/dev/graft-test0".into()],
            nodes: nodes.iter().map(NodeId::of).collect(),
            shared: false,
            health: None,
        }],
        unpublished: BTreeMap::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graftctl_shows_devices_claims_and_containers() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let dir = Scratch::new(format!("/tmp/graft-it-ctl-{}", std::process::id()))?;
    let cd = Containerd::start(&tb, Version::V2_2, &dir)?;
    let state = dir.join("graft-state");
    let store = RecordStore::open(&state)?;
    let mut nri = GraftNri::start(&cd.nri_socket, &state, &dir.join("logs/graft-nri.log"), &[])?;
    nri.wait_synchronized(LONG)?;
    let cri = Cri::connect(&cd.socket, &dir.join("pods")).await?;

    let md = std::fs::metadata("/dev/cpu_dma_latency")
        .context("the test device /dev/cpu_dma_latency")?;
    let (maj, min) = (major(md.rdev()) as i64, minor(md.rdev()) as i64);
    let edits = ContainerEdits {
        device_nodes: vec![char_node("/dev/graft-test0", maj, min, 0o600)],
        env: vec![EnvVar {
            name: "GRAFT_SECRET".into(),
            value: "hunter2".into(),
        }],
        ..Default::default()
    };
    let pod_uid = format!("ctl-pod-{}", std::process::id());
    let claim_uid = format!("ctl-claim-{}", std::process::id());
    store.put_claim(&one_device_claim(
        &claim_uid,
        "claim-ctl",
        &pod_uid,
        &["app"],
        "testdev-0",
        edits.clone(),
    ))?;
    write_snapshot(&state, &snapshot("testbed", &edits.device_nodes))?;
    let pod = cri.run_pod("pod-ctl", &pod_uid).await?;
    let id = cri.create_and_start(&pod, "app", "exec sleep 3600").await?;

    // devices: the device, held by the claim.
    let out = ok(&state, &["devices"])?;
    ensure!(
        out.lines()
            .any(|l| l.contains("testdev-0") && l.contains("default/claim-ctl")),
        "{out}"
    );
    let v = json(&state, &["devices"])?;
    ensure!(v["devices"][0]["claims"][0] == "default/claim-ctl", "{v}");
    ensure!(v["devices"][0]["health"] == "Healthy", "{v}");

    // claims: pod, container, edits; env names only.
    let out = ok(&state, &["claims"])?;
    ensure!(
        out.contains("default/claim-ctl")
            && out.contains(&format!("default/pod-{pod_uid}"))
            && out.contains("/dev/graft-test0")
            && out.contains("GRAFT_SECRET")
            && !out.contains("hunter2"),
        "{out}"
    );
    let v = json(&state, &["claims", "default/claim-ctl"])?;
    ensure!(v[0]["uid"] == claim_uid.as_str(), "{v}");
    ensure!(!v.to_string().contains("hunter2"), "{v}");
    let v = json(&state, &["claims", &claim_uid])?;
    ensure!(v[0]["pods"][0]["containers"][0]["name"] == "app", "{v}");
    refused(&state, &["claims", "default/nope"], &["no prepared claim"])?;

    // explain, by a prefix of the id as crictl takes them.
    let out = ok(&state, &["explain", &id[..12]])?;
    ensure!(
        out.contains(&id)
            && out.contains("/dev/graft-test0")
            && out.contains(&format!("claims/{claim_uid}.json"))
            && out.contains("[present]")
            && out.contains("GRAFT_SECRET")
            && !out.contains("hunter2"),
        "{out}"
    );
    let v = json(&state, &["explain", &id])?;
    ensure!(v["container"]["id"] == id.as_str(), "{v}");
    ensure!(v["container"]["container"] == "app", "{v}");
    ensure!(v["records"][0]["state"] == "present", "{v}");

    // The forms kubectl shows (containerd://<id>) and pods by name, as the entry names them.
    let v = json(&state, &["explain", &format!("containerd://{id}")])?;
    ensure!(v["container"]["id"] == id.as_str(), "{v}");
    for name in ["default/pod-ctl", "default/pod-ctl/app"] {
        let v = json(&state, &["explain", name])?;
        ensure!(v["container"]["id"] == id.as_str(), "{name}: {v}");
    }
    let out = ok(&state, &["explain", "default/pod-ctl", "-o", "yaml"])?;
    ensure!(
        out.contains("  id: ") && out.contains(&id) && out.contains("- GRAFT_SECRET"),
        "{out}"
    );
    refused(
        &state,
        &["explain", "default/nope"],
        &["no pod default/nope", "pods here: default/pod-ctl"],
    )?;
    refused(
        &state,
        &["explain", "default/pod-ctl/db"],
        &["no container \"db\"", "app"],
    )?;
    refused(
        &state,
        &["explain", "containerd://xyz"],
        &["\"containerd://xyz\"", "64 hex digits"],
    )?;
    refused(
        &state,
        &["explain", "Default/pod-ctl"],
        &["\"Default/pod-ctl\"", "not a valid"],
    )?;

    // -o wide, yaml, --no-headers.
    let out = ok(&state, &["devices", "-o", "wide", "--no-headers"])?;
    ensure!(
        !out.contains("NAME")
            && out.lines().any(|l| l.contains("testdev-0")
                && l.contains("default/claim-ctl")
                && l.contains("/dev/graft-test0")
                && l.contains("type=test")),
        "{out}"
    );
    let out = ok(&state, &["devices", "-o", "yaml"])?;
    ensure!(
        out.contains("- name: testdev-0\n") && out.contains("- default/claim-ctl\n"),
        "{out}"
    );
    let out = ok(&state, &["claims", "-o", "wide"])?;
    ensure!(
        out.lines().next().is_some_and(|h| h.contains("POD UID"))
            && out.contains(&pod_uid)
            && !out.contains("hunter2"),
        "{out}"
    );

    let v = json(&state, &["status"])?;
    ensure!(v["nri"]["ready"] == true, "{v}");
    ensure!(
        v["counts"]["containers"] == 1 && v["counts"]["claims"] == 1,
        "{v}"
    );

    // Hostile state: a symlinked entry, an oversized one, an id that climbs out.
    let entries = state.join("containers");
    std::os::unix::fs::symlink(
        entries.join(format!("{id}.json")),
        entries.join("evil.json"),
    )?;
    refused(
        &state,
        &["explain", "evil"],
        &["containers/evil.json", "symlink"],
    )?;
    std::fs::write(entries.join("big.json"), vec![b' '; 2 << 20])?;
    refused(
        &state,
        &["explain", "big"],
        &["containers/big.json", "larger than"],
    )?;
    refused(&state, &["explain", "../x"], &["not a valid"])?;
    std::os::unix::fs::symlink("/etc/passwd", state.join("claims/planted.json"))?;
    let out = ok(&state, &["claims"])?;
    ensure!(
        out.contains("unreadable") && out.contains("symlink"),
        "{out}"
    );
    std::fs::remove_file(state.join("claims/planted.json"))?;
    for f in ["evil.json", "big.json"] {
        std::fs::remove_file(entries.join(f))?;
    }

    // The claim unprepared under a running container: explain says so.
    store.remove_claim(&claim_uid)?;
    let out = ok(&state, &["explain", &id])?;
    ensure!(
        out.contains("GONE: the claim was unprepared since"),
        "{out}"
    );

    // Removing the pod removes the entry (graft-nri's RemoveContainer).
    cri.remove_pod(&pod).await?;
    let deadline = Instant::now() + LONG;
    while entries.join(format!("{id}.json")).exists() {
        if Instant::now() > deadline {
            bail!("the entry of removed container {id} is still there");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    refused(&state, &["explain", &id], &["no container"])?;
    Ok(())
}
