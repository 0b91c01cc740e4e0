//! MPS on Kubernetes 1.34, the oldest graft supports (the gates of README's support table,
//! cluster.sh). Its allocator does not allocate shares that ask a capacity on graft's slices
//! (docs/nvidia.md), so this asks the MPS GPU whole: the claim is prepared, graft-mps runs
//! the tenancy's daemon, the pod's CUDA probe goes through it, and another namespace's pod
//! stays Pending and unbound with the scheduler's reason until the first leaves.

use std::time::Instant;

use anyhow::ensure;
use graft_integration::cluster::gpu::GpuValues;
use graft_integration::cluster::workloads::{wait_log_in, wait_running};
use graft_integration::cluster::Cluster;
use graft_integration::fake_gpu::FakeNode;

use super::mps_support::*;

/// The MPS GPU, its tenancy taint on (1.34 serves the policy API with its gate).
pub fn values() -> GpuValues {
    GpuValues {
        mps: MPS_GPU.into(),
        helm: vec!["--set".into(), format!("nvidia.mpsShmSize={SHM_SIZE}")],
        ..Default::default()
    }
}

pub fn whole_gpu(c: &Cluster, node: &FakeNode) -> anyhow::Result<()> {
    import_probe_image(node)?;
    graft_mps_ready(c)?;
    let run = "graft-cuda-probe; sleep 3600";
    c.apply(&mps_pod("a", "whole-a", None, None, run))?;
    wait_log_in(c, "a", "whole-a", "app", "PROBE PASS")?;
    let t = tenancy(&gpu_dir()?)?;
    let control = control_log(&t);
    ensure!(
        control.contains("Client "),
        "the probe did not use MPS:\n{control}"
    );
    let server = server_log(&t);
    ensure!(
        server.contains("uid 0 active_thread_percentage 100"),
        "{server}"
    );

    c.apply(&mps_pod("b", "whole-b", None, None, run))?;
    let why = stays_unschedulable(c, "b", "whole-b")?;
    println!("on 1.34, another namespace waits: {why}");
    let start = Instant::now();
    c.kubectl(&["-n", "a", "delete", "pod", "whole-a", "--wait=false"])?;
    wait_running(c, "b", "whole-b")?;
    println!(
        "on 1.34, it ran {:?} after the first namespace's pod was deleted",
        start.elapsed()
    );
    Ok(())
}
