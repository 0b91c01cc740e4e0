//! `graft-demo`: brings up the testbed's containerd (2.2.x) with graft-nri attached,
//! records a claim the way graft-driver does, runs a pod whose `app` container holds it
//! (and a `sidecar` that does not), and shows what each container got.
//!
//!   graft-demo [--keep]     --keep leaves everything running and prints how to explore

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use graft_integration::records::{char_node, one_device_claim, ro_bind};
use graft_integration::{Containerd, Cri, GraftNri, Testbed, Version};
use graft_record::*;

const DEV: &str = "/dev/cpu_dma_latency";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let keep = std::env::args().any(|a| a == "--keep");
    let tb = Testbed::load()?;
    let dir = PathBuf::from("/tmp/graft-demo");
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "== starting containerd 2.2 on private paths under {}",
        dir.display()
    );
    let mut cd = Containerd::start(&tb, Version::V2_2, &dir)?;
    let state = dir.join("graft-state");
    // The demo's config file is mounted from the demo directory: an allowed mount root.
    let roots = dir.to_string_lossy().into_owned();
    let mut nri = GraftNri::start(
        &cd.nri_socket,
        &state,
        &dir.join("logs/graft-nri.log"),
        &["--allowed-mount-roots", &roots],
    )?;
    let status = nri.wait_synchronized(Duration::from_secs(60))?;
    println!(
        "== graft-nri connected to {} {} and synchronized",
        status.runtime_name, status.runtime_version
    );

    use std::os::unix::fs::MetadataExt;
    let rdev = std::fs::metadata(DEV)
        .with_context(|| format!("{DEV} is the demo device"))?
        .rdev();
    let (major, minor) = (
        nix::sys::stat::major(rdev) as i64,
        nix::sys::stat::minor(rdev) as i64,
    );
    let conf = dir.join("demo.conf");
    std::fs::write(&conf, "hello from the host\n")?;
    let pod_uid = "3f1c2a9e-0d4b-4c8e-9a7f-5b6d8e2c1a00";
    let edits = ContainerEdits {
        device_nodes: vec![char_node("/dev/graft0", major, minor, 0o600)],
        mounts: vec![ro_bind(&conf, "/etc/graft/demo.conf")],
        env: vec![EnvVar {
            name: "GRAFT_DEVICE".into(),
            value: "latency-0".into(),
        }],
        hooks: vec![],
    };
    let record = one_device_claim(
        "7a9d4e21-8c3b-4f5a-b1e6-0c2d9f8a7b10",
        "demo-dev",
        pod_uid,
        &["app"],
        "latency-0",
        edits,
    );
    RecordStore::open(&state)?.put_claim(&record)?;
    println!("== recorded claim default/demo-dev: device latency-0 ({DEV}, c {major}:{minor}) for container app of pod {pod_uid}");

    let cri = Cri::connect(&cd.socket, &dir.join("pods")).await?;
    let pod = cri.run_pod("demo", pod_uid).await?;
    let script = "ls -l /dev/graft0 2>&1; head -c 4 /dev/graft0 >/dev/null 2>&1 && echo 'read /dev/graft0: ok' || echo 'read /dev/graft0: failed'; echo GRAFT_DEVICE=$GRAFT_DEVICE; cat /etc/graft/demo.conf 2>&1; echo DONE; exec sleep 3600";
    let app = cri.create_and_start(&pod, "app", script).await?;
    let sidecar = cri.create_and_start(&pod, "sidecar", script).await?;
    for (name, id) in [("app", &app), ("sidecar", &sidecar)] {
        let log = cri
            .wait_log(&pod, name, "DONE", Duration::from_secs(60))
            .await?;
        println!("\n== container {name} ({}) says:\n{log}", &id[..12]);
    }
    for (name, id) in [("app", &app), ("sidecar", &sidecar)] {
        let spec = cd.runtime_spec(id)?;
        let view = serde_json::json!({
            "annotations": { INJECTED_ANNOTATION: spec["annotations"][INJECTED_ANNOTATION] },
            "linux.devices": spec["linux"]["devices"],
            "linux.resources.devices": spec["linux"]["resources"]["devices"],
            "process.env": spec["process"]["env"].as_array().map(|e| e.iter().filter(|v| v.as_str().is_some_and(|s| s.starts_with("GRAFT"))).cloned().collect::<Vec<_>>()),
            "mounts": spec["mounts"].as_array().map(|m| m.iter().filter(|v| v["destination"].as_str().is_some_and(|d| d.starts_with("/etc/graft"))).cloned().collect::<Vec<_>>()),
        });
        println!(
            "\n== crictl inspect {} | jq .info.runtimeSpec  (container {name}, graft's part)\n{}",
            &id[..12],
            serde_json::to_string_pretty(&view)?
        );
    }
    if keep {
        println!("\n== left running. Explore with:\n  {} --runtime-endpoint unix://{} ps\n  {} --runtime-endpoint unix://{} inspect {} | jq .info.runtimeSpec\nlogs under {}/logs; stop with: pkill -f 'containerd --config {}/config.toml'",
            tb.crictl.display(), cd.socket.display(), tb.crictl.display(), cd.socket.display(), &app[..12], dir.display(), dir.display());
        std::mem::forget(nri);
        std::mem::forget(cd);
    } else {
        cri.remove_pod(&pod).await?;
        nri.stop()?;
        cd.teardown();
        println!("\n== torn down (run with --keep to leave it up)");
    }
    Ok(())
}
