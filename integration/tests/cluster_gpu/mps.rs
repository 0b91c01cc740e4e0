//! GPU sharing through MPS on the cluster, with the GPU setup as shipped, the fake NVML and
//! the stand-in MPS control program: GPU index 4 (gpu-6) takes several claims, each asking
//! for a compute percentage and memory (consumable capacity). Claims of 40 % and 60 % run
//! side by side, each container seeing its limits; one of 50 % waits until there is room;
//! one control daemon serves the GPU, comes back when graft-driver restarts, and stops with
//! the last share.

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context};
use graft_integration::cluster::{wait_until, workloads, Cluster};
use graft_integration::fake_gpu::FakeNode;

/// The GPU shared through MPS, as --nvidia-mps takes it, and its directory in graft's
/// state (the same host path graft-driver's container writes).
pub const MPS_GPU: &str = "4";
const GPU_DIR: &str = "/var/lib/graft/mps/gpu-6";

fn share_pod(name: &str, compute: u32, memory: &str) -> String {
    workloads::claim_template_consuming(
        name,
        "gpu.graft.dev",
        Some(r#"device.attributes["graft.dev"].?sharing.orValue("") == "mps""#),
        Some(&format!(r#"{{compute: "{compute}", memory: {memory}}}"#)),
    ) + &workloads::one_claim_pod(
        name,
        "gpu",
        "env | grep CUDA_MPS | sort; ls /tmp/nvidia-mps; echo DONE; sleep 3600",
    )
}

fn daemon_log() -> String {
    FakeNode::mps_log(&Path::new(GPU_DIR).join("log"))
}

fn running() -> bool {
    FakeNode::mps_daemon_running(&Path::new(GPU_DIR).join("pipe"))
}

pub fn mps(c: &Cluster) -> anyhow::Result<()> {
    // An earlier pod may have been given this GPU whole (and its daemon with it).
    let starts = |log: &str| log.matches("Startup").count();
    let before = starts(&daemon_log());
    wait_until("the MPS GPU was never published shared", || {
        Ok(c.kubectl(&["get", "resourceslices", "-o", "json"])?
            .contains("\"allowMultipleAllocations\": true"))
    })?;
    c.apply(&share_pod("mps-a", 40, "30Gi"))?;
    c.apply(&share_pod("mps-b", 60, "40Gi"))?;
    c.wait_phase("mps-a", "Running")?;
    c.wait_phase("mps-b", "Running")?;
    for (pod, compute, mib) in [("mps-a", 40, 30 * 1024), ("mps-b", 60, 40 * 1024)] {
        let log = workloads::wait_log(c, pod, "app", "DONE")?;
        for want in [
            format!("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={compute}"),
            format!("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={mib}M"),
            "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps".into(),
            "control".into(),
        ] {
            ensure!(log.contains(&want), "{pod}: {want:?} not in\n{log}");
        }
    }
    ensure!(running(), "no MPS daemon for the GPU");
    ensure!(
        starts(&daemon_log()) == before + 1,
        "one daemon for two shares:\n{}",
        daemon_log()
    );

    // 40 % + 60 % leave nothing: a 50 % share waits.
    c.apply(&share_pod("mps-c", 50, "10Gi"))?;
    std::thread::sleep(Duration::from_secs(8));
    ensure!(
        c.pod_phase("mps-c") == "Pending",
        "the 50 % share is {:?} beside 40 % and 60 %",
        c.pod_phase("mps-c")
    );

    // graft-driver restarts: the daemon died with its container and comes back, once.
    workloads::restart_graft(c)?;
    wait_until("no MPS daemon after graft-driver restarted", || {
        Ok(running())
    })?;
    let n = starts(&daemon_log());
    ensure!(
        n == before + 2,
        "{n} starts (from {before}) after one restart:\n{}",
        daemon_log()
    );

    c.kubectl(&["delete", "pod", "mps-a", "--wait=true"])?;
    ensure!(
        running(),
        "the daemon stopped while mps-b still holds a share"
    );
    c.kubectl(&["delete", "pod", "mps-b", "--wait=true"])?;
    c.wait_phase("mps-c", "Running")
        .context("the 50 % share did not run once there was room")?;
    c.kubectl(&["delete", "pod", "mps-c", "--wait=true"])?;
    workloads::wait_unprepared(c)?;
    wait_until("the MPS daemon outlived the last share", || Ok(!running()))?;
    ensure!(daemon_log().contains("Shutdown"), "{}", daemon_log());
    Ok(())
}
