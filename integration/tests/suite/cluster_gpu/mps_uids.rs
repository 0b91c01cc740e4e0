//! Pods of one namespace that run as different UIDs, on one MPS GPU, under MPS v3
//! (`nvidia.mpsProtocol: 3`; the fake node's MPS programs are those of a v3 driver): each
//! UID gets a server of its own and runs while the other's client is still connected,
//! where the legacy protocol would make it wait (docs/nvidia.md: MPS).

use std::time::Instant;

use anyhow::ensure;
use graft_integration::cluster::gpu::GpuValues;
use graft_integration::cluster::workloads::{phase, wait_log_in};
use graft_integration::cluster::{wait_until, Cluster};
use graft_integration::fake_gpu::FakeNode;

use super::mps_support::*;

/// The MPS GPU, its daemons on MPS v3.
pub fn values() -> GpuValues {
    GpuValues {
        mps: MPS_GPU.into(),
        helm: vec![
            "--set".into(),
            format!("nvidia.mpsShmSize={SHM_SIZE}"),
            "--set".into(),
            "nvidia.mpsProtocol=3".into(),
        ],
        ..Default::default()
    }
}

/// Before graft starts: MPS programs of a driver with v3.
pub fn v3_programs(node: &FakeNode) -> anyhow::Result<()> {
    node.install_mps_of(crate::fake_mps_v3::V3_DRIVER)
}

pub fn two_uids_one_namespace(c: &Cluster, node: &FakeNode) -> anyhow::Result<()> {
    import_probe_image(node)?;
    graft_mps_ready(c)?;
    let hold = "GRAFT_PROBE_HOLD_SECONDS=3600 graft-cuda-probe";
    c.apply(&share_pod("a", "uid-1000", 20, "1Gi", Some(1000), hold))?;
    wait_log_in(c, "a", "uid-1000", "app", "PROBE HOLDING")?;
    let start = Instant::now();
    let run = "graft-cuda-probe; sleep 3600";
    c.apply(&share_pod("a", "uid-2000", 20, "1Gi", Some(2000), run))?;
    wait_log_in(c, "a", "uid-2000", "app", "PROBE PASS")?;
    println!(
        "UID 2000's probe passed {:?} after its pod was created, beside UID 1000's client",
        start.elapsed()
    );
    ensure!(
        phase(c, "a", "uid-1000") == "Running",
        "UID 1000's pod ended"
    );
    let t = tenancy(&gpu_dir()?)?;
    // graft-mps sets the namespace's limits (two shares of 20) on each server, the new one
    // at its next pass.
    let limited = |uid: u32| {
        control_log(&t).contains(&format!(
            "Command server set uid_{uid} --active-thread-percentage=40 "
        ))
    };
    wait_until("graft-mps set no limits on a server", || {
        Ok(limited(1000) && limited(2000))
    })?;
    let control = control_log(&t);
    ensure!(control.contains("] Protocol 3\n"), "{control}");
    for uid in [1000, 2000] {
        ensure!(
            control.contains(&format!("starting uid {uid} ")),
            "no server of uid {uid}:\n{control}"
        );
    }
    ensure!(!control.contains("queued"), "a client waited:\n{control}");
    Ok(())
}
