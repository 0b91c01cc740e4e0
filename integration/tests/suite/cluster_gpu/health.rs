//! GPU failures on the cluster, through the chart as shipped on the fake node: a GPU that
//! fell off the bus before graft started never takes the node's other devices (or
//! graft-driver) down, and a fatal XID keeps its GPU tainted until the driver says nothing
//! needs doing, however long that takes and across graft-driver restarts.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_integration::cluster::gpu::{with_bed, GpuValues};
use graft_integration::cluster::workloads::{
    events, graft_ready, graft_restarts, published_devices, restart_graft, taints,
};
use graft_integration::cluster::{wait_until, Cluster};
use graft_integration::fake_gpu::FakeNode;

/// graft's state on the host (the chart's state directory), where health is kept.
const CONDITIONS: &str = "/var/lib/graft/health/conditions.json";

fn no_restarts(c: &Cluster) -> anyhow::Result<()> {
    let restarts = graft_restarts(c).context("graft's restart counts")?;
    ensure!(
        restarts.split_whitespace().all(|n| n.ends_with("=0")),
        "graft restarted: {restarts}"
    );
    Ok(())
}

/// NVML index 1 (gpu-3) lost before graft-driver starts: it starts once, publishes
/// everything else, says which GPU it left out and why, and publishes the GPU healthy once
/// NVML reads it again.
pub fn a_lost_gpu_at_start(c: &Cluster, node: &FakeNode) -> anyhow::Result<()> {
    graft_ready(c)?;
    let devices = published_devices(c)?;
    for want in [
        "fuse",
        "gpu-0",
        "gpu-1",
        "gpu-2",
        "gpu-6",
        "gpu-7",
        "gpu-4-mig-1-0",
    ] {
        ensure!(
            devices.iter().any(|d| d == want),
            "{want} is not published: {devices:?}"
        );
    }
    ensure!(
        !devices.iter().any(|d| d == "gpu-3"),
        "the lost GPU is published: {devices:?}"
    );
    wait_until("no GpuUnavailable Event on the Node", || {
        Ok(events(c, "GpuUnavailable")?.lines().any(|l| {
            l.starts_with("Node")
                && l.contains("NVML index 1")
                && l.contains("NVML_ERROR_GPU_IS_LOST")
        }))
    })?;
    no_restarts(c)?;

    // Back on the bus: published at the next scan (every few seconds while a GPU is left
    // out), without a taint.
    let start = Instant::now();
    node.inject("1 found")?;
    wait_until("gpu-3 never came back", || {
        Ok(published_devices(c)?.iter().any(|d| d == "gpu-3"))
    })?;
    println!("a GPU back on the bus to published: {:?}", start.elapsed());
    // Past a probe interval: still healthy.
    std::thread::sleep(Duration::from_secs(12));
    let t = taints(c, "gpu-3")?;
    ensure!(t.is_empty(), "gpu-3 came back tainted: {t:?}");
    no_restarts(c)
}

/// Fatal XID 79 with the driver asking for a reset: tainted past the recovery window (set
/// to 5 s, so that only the rule can keep it), across a graft-driver restart, and cleared
/// once the recovery action reads none and the probe passes.
pub fn fatal_xid(c: &Cluster, node: &FakeNode) -> anyhow::Result<()> {
    // The monitor watches events once an informational XID shows as degraded on gpu-3.
    let start = Instant::now();
    while !taints(c, "gpu-3")?.contains("graft.dev/degraded=xid-13") {
        ensure!(
            start.elapsed() < Duration::from_secs(120),
            "the monitor never registered"
        );
        node.inject("1 xid 13")?;
        std::thread::sleep(Duration::from_secs(1));
    }
    node.inject("0 xid 79")?;
    node.inject("0 recovery 1")?;
    let tainted = "graft.dev/unhealthy=xid-79:NoSchedule\n";
    wait_until("gpu-2 never tainted", || Ok(taints(c, "gpu-2")? == tainted))?;
    let since = Instant::now();
    // The degraded one goes after its 5 s: the window is short.
    wait_until("gpu-3's degraded taint never went", || {
        Ok(taints(c, "gpu-3")?.is_empty())
    })?;
    // Well past the window and two probe intervals: still tainted.
    let left = Duration::from_secs(25).saturating_sub(since.elapsed());
    std::thread::sleep(left);
    let t = taints(c, "gpu-2")?;
    ensure!(t == tainted, "gpu-2 after {:?}: {t:?}", since.elapsed());
    ensure!(
        std::fs::read_to_string(CONDITIONS)?.contains("xid-79"),
        "the condition is not kept in {CONDITIONS}"
    );

    // graft-driver restarts: the new one publishes gpu-2 tainted, and keeps it so after
    // its first probes.
    restart_graft(c)?;
    graft_ready(c)?;
    let t = taints(c, "gpu-2")?;
    ensure!(t == tainted, "gpu-2 after the restart: {t:?}");
    std::thread::sleep(Duration::from_secs(15));
    let t = taints(c, "gpu-2")?;
    ensure!(t == tainted, "gpu-2 15 s after the restart: {t:?}");

    // Reset done: the driver says nothing needs doing, the probe passes.
    let start = Instant::now();
    node.inject("0 recovery 0")?;
    wait_until("gpu-2's taint never went", || {
        Ok(taints(c, "gpu-2")?.is_empty())
    })?;
    println!("recovery action none to untainted: {:?}", start.elapsed());
    wait_until("no DeviceRecovered Event for gpu-2", || {
        Ok(events(c, "DeviceRecovered")?.contains("gpu-2 is healthy again"))
    })?;
    Ok(())
}

/// The two tests, each on a fresh install.
pub fn lost_gpu_test() -> anyhow::Result<()> {
    with_bed(|bed| {
        bed.fresh(&GpuValues::default(), |node| node.inject("1 lost"))?;
        a_lost_gpu_at_start(&bed.cluster, &bed.node)
    })
}

pub fn fatal_xid_test() -> anyhow::Result<()> {
    with_bed(|bed| {
        let values = GpuValues {
            helm: vec!["--set".into(), "nvidia.healthRecoverySeconds=5".into()],
            ..Default::default()
        };
        bed.fresh(&values, |_| Ok(()))?;
        fatal_xid(&bed.cluster, &bed.node)
    })
}
