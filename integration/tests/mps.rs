//! MPS sharing in graft-driver against the fake node's stand-in `nvidia-cuda-mps-control`:
//! a GPU listed for MPS is published shareable with compute and memory policies; each share
//! prepared gets its limits and the GPU's pipe and shared-memory directories; one daemon
//! serves all shares of a GPU, stops with the last, and start-up restores exactly the
//! daemons the checkpoint's shares need. Needs root (the daemon gets its own mount
//! namespace for /dev/shm).

use std::collections::BTreeMap;
use std::path::Path;

use graft_driver::core::input::Allocated;
use graft_driver::discovery::nvidia::mps::MpsManager;
use graft_driver::discovery::nvidia::selection::GpuSelection;
use graft_driver::discovery::nvidia::NvidiaDiscovery;
use graft_driver::discovery::{Attribute, Discovery};
use graft_driver::setup::{DeviceSetup, Setup};
use graft_integration::fake_gpu::FakeNode;

mod common;

fn share(id: &str, compute: &str, memory: &str) -> Allocated {
    Allocated {
        device: "gpu-2".into(),
        share_id: Some(id.into()),
        consumed: BTreeMap::from([
            ("compute".to_string(), compute.to_string()),
            ("memory".to_string(), memory.to_string()),
        ]),
        ..Default::default()
    }
}

fn env(e: &graft_record::ContainerEdits, name: &str) -> Option<String> {
    e.env
        .iter()
        .find(|v| v.name == name)
        .map(|v| v.value.clone())
}

/// Stops the GPU's daemon however the test ends.
struct Quit<'a>(&'a Path, &'a Path);
impl Drop for Quit<'_> {
    fn drop(&mut self) {
        if FakeNode::mps_daemon_running(&self.1.join("pipe")) {
            let _ = std::process::Command::new(self.0)
                .env_clear()
                .env("CUDA_MPS_PIPE_DIRECTORY", self.1.join("pipe"))
                .stdin(std::process::Stdio::piped())
                .spawn()
                .and_then(|mut c| {
                    use std::io::Write;
                    c.stdin.take().map(|mut s| s.write_all(b"quit\n"));
                    c.wait()
                });
        }
    }
}

#[test]
fn shares_of_one_gpu_get_their_limits_and_one_daemon() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: the MPS daemon's mount namespace needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::create(&dir.path().join("node")).unwrap();
    let state = dir.path().join("state");
    let mut config = common::discovery_config(&node, common::as_driver_root(&node), 0, "/bin/true");
    config.mps = GpuSelection::parse("0").unwrap();
    let d = NvidiaDiscovery::new(config).unwrap();
    let devices = d.discover().unwrap();
    let gpu = devices.iter().find(|x| x.name == "gpu-2").unwrap().clone();
    assert_eq!(gpu.attributes["sharing"], Attribute::String("mps".into()));
    let policies = gpu.shared.as_ref().expect("published shareable");
    assert_eq!(policies["compute"].max, "100");
    assert_eq!(policies["memory"].default, gpu.capacity["memory"]);
    assert!(devices
        .iter()
        .find(|x| x.name == "gpu-3")
        .unwrap()
        .shared
        .is_none());

    let manager = MpsManager {
        control: d.mps_control_path(),
        lib_dir: d.nvml_path().unwrap().parent().unwrap().to_path_buf(),
        state_dir: state.clone(),
    };
    let gpu_dir = state.join("mps/gpu-2");
    let control = node.mps_control_path();
    let _quit = Quit(&control, &gpu_dir);
    let s = common::nvidia_setup(&node, None, Some(manager.clone()));
    let a = s
        .plan(
            &gpu,
            None,
            &share("1b4e28ba-2fa1-11d2-883f-0016d3cca427", "40", "30Gi"),
        )
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            &a,
            Setup::Mps {
                compute: 40,
                memory_mib: Some(30720),
                minor: 2,
                ..
            }
        ),
        "{a:?}"
    );
    let b = s
        .plan(
            &gpu,
            None,
            &share("6fa459ea-ee8a-3ca4-894e-db77e160355e", "60", "40Gi"),
        )
        .unwrap()
        .unwrap();
    // A share the scheduler could not have made is refused, not rounded.
    let err = s
        .plan(
            &gpu,
            None,
            &share("7c9e6679-7425-40de-944b-e07fc1f90ae7", "150", "1Gi"),
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("percentage"), "{err}");

    let ea = s.apply(&a).unwrap().unwrap();
    assert_eq!(
        env(&ea, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE").as_deref(),
        Some("40")
    );
    assert_eq!(
        env(&ea, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT").as_deref(),
        Some("0=30720M")
    );
    assert_eq!(
        env(&ea, "CUDA_MPS_PIPE_DIRECTORY").as_deref(),
        Some("/tmp/nvidia-mps")
    );
    let mounts: Vec<(&str, &str)> = ea
        .mounts
        .iter()
        .map(|m| (m.source.as_str(), m.destination.as_str()))
        .collect();
    let pipe = gpu_dir.join("pipe").to_string_lossy().into_owned();
    let shm = gpu_dir.join("shm").to_string_lossy().into_owned();
    assert_eq!(
        mounts,
        [
            (pipe.as_str(), "/tmp/nvidia-mps"),
            (shm.as_str(), "/dev/shm")
        ]
    );
    let log = || FakeNode::mps_log(&gpu_dir.join("log"));
    assert!(FakeNode::mps_daemon_running(&gpu_dir.join("pipe")));
    assert!(log().contains("CUDA_VISIBLE_DEVICES=GPU-"), "{}", log());
    s.apply(&b).unwrap();
    assert_eq!(log().matches("Startup").count(), 1, "{}", log());

    // One share gone: the daemon serves the other. Both gone: it stops; twice is fine.
    s.undo(&a).unwrap();
    assert!(FakeNode::mps_daemon_running(&gpu_dir.join("pipe")));
    s.undo(&b).unwrap();
    s.undo(&b).unwrap();
    assert!(!FakeNode::mps_daemon_running(&gpu_dir.join("pipe")));
    assert!(log().contains("Shutdown"), "{}", log());

    // Start-up after the daemon died with graft-driver's container: back for the shares
    // the checkpoint holds, markers of others dropped; with no shares, none.
    std::fs::create_dir_all(gpu_dir.join("clients")).unwrap();
    std::fs::write(gpu_dir.join("clients/stale-share"), "x").unwrap();
    manager.restore(std::slice::from_ref(&a)).unwrap();
    assert!(FakeNode::mps_daemon_running(&gpu_dir.join("pipe")));
    assert_eq!(log().matches("Startup").count(), 2, "{}", log());
    manager.restore(std::slice::from_ref(&a)).unwrap();
    assert_eq!(
        log().matches("Startup").count(),
        2,
        "no second daemon: {}",
        log()
    );
    assert!(!gpu_dir.join("clients/stale-share").exists());
    manager.restore(&[]).unwrap();
    assert!(!FakeNode::mps_daemon_running(&gpu_dir.join("pipe")));
}
