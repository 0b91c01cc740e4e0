//! GPU health on the cluster, with the GPU setup as shipped and NVML events fed through
//! the fake library: a fatal XID taints the GPU in the ResourceSlice (the GPU then falls off
//! the bus: it stays published, tainted), a pod asking for that GPU waits, a running pod's
//! status and Events say its GPU went bad, and the GPU back on the bus with the driver's
//! "no action needed" brings both GPUs back without restarting anything.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_integration::cluster::workloads::{self, events, taints};
use graft_integration::cluster::{wait_until, Cluster};
use graft_integration::fake_gpu::FakeNode;

/// A pod whose container uses the GPU at PCI address `bus` (a CEL selector on the
/// published `pciBusID`).
fn pinned_gpu_pod(name: &str, bus: &str) -> String {
    let cel = format!(r#"device.attributes["graft.dev"].pciBusID == "{bus}""#);
    workloads::claim_template(name, "gpu.graft.dev", Some(&cel))
        + &workloads::one_claim_pod(name, "gpu", "echo started; sleep 3600")
}

/// The health the kubelet shows for the pod's allocated devices.
fn pod_device_health(c: &Cluster, pod: &str) -> anyhow::Result<String> {
    c.kubectl(&[
        "get",
        "pod",
        pod,
        "-o",
        "jsonpath={.status.containerStatuses[*].allocatedResourcesStatus[*].resources[*]}",
    ])
}

pub fn gpu_health(c: &Cluster, node: &FakeNode) -> anyhow::Result<()> {
    // NVML index 1 is gpu-3 at bus 0x2a; index 0 is gpu-2 at bus 0x18.
    c.apply(&pinned_gpu_pod("holder", "0000:2a:00.0"))?;
    c.wait_phase("holder", "Running")?;
    wait_until(
        "the holder's GPU never showed healthy in its status",
        || Ok(pod_device_health(c, "holder")?.contains("Healthy")),
    )?;

    // A GPU falls off the bus: the taint is in the ResourceSlice within 2 s.
    let start = Instant::now();
    node.inject("0 xid 79")?;
    node.inject("0 lost")?;
    let mut seen = String::new();
    while start.elapsed() < Duration::from_secs(10) {
        seen = taints(c, "gpu-2")?;
        if !seen.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = start.elapsed();
    println!("XID 79 injected to taint in the ResourceSlice: {took:?}");
    ensure!(
        seen == "graft.dev/unhealthy=xid-79:NoSchedule\n",
        "gpu-2 taints after {took:?}: {seen:?}"
    );
    ensure!(took < Duration::from_secs(2), "the taint took {took:?}");

    // A new pod that can only use that GPU is not scheduled.
    c.apply(&pinned_gpu_pod("waits", "0000:18:00.0"))?;
    std::thread::sleep(Duration::from_secs(5));
    ensure!(
        c.pod_phase("waits") == "Pending",
        "a pod got the tainted GPU: {}",
        c.pod_phase("waits")
    );
    wait_until("no DeviceUnhealthy Event on the Node", || {
        Ok(events(c, "DeviceUnhealthy")?.lines().any(|l| {
            l.starts_with("Node") && l.contains("gpu-2: XID 79 (GPU has fallen off the bus)")
        }))
    })?;

    // The running pod's GPU reports a double-bit ECC error, and the driver asks for a
    // reset: the pod keeps running, and its status and Events say what happened.
    node.inject("1 ecc-double-bit")?;
    node.inject("1 recovery 1")?;
    wait_until("the holder's status never showed its GPU unhealthy", || {
        Ok(pod_device_health(c, "holder")?.contains("Unhealthy"))
    })?;
    let h = pod_device_health(c, "holder")?;
    ensure!(h.contains("graft.dev/graft-node/gpu-3"), "{h}");
    wait_until("no DeviceUnhealthy Event on the holder pod", || {
        Ok(events(c, "DeviceUnhealthy")?
            .lines()
            .any(|l| l.starts_with("Pod") && l.contains("holder") && l.contains("gpu-3")))
    })?;
    ensure!(c.pod_phase("holder") == "Running", "the holder stopped");

    // Back on the bus, and the driver says no action is needed: both GPUs recover, the
    // waiting pod is scheduled, and nothing was restarted.
    node.inject("0 found")?;
    node.inject("0 recovery 0")?;
    node.inject("1 recovery 0")?;
    wait_until("the taints never went", || {
        Ok(taints(c, "gpu-2")?.is_empty() && taints(c, "gpu-3")?.is_empty())
    })?;
    c.wait_phase("waits", "Running")?;
    wait_until(
        "the holder's status never showed its GPU healthy again",
        || {
            let h = pod_device_health(c, "holder")?;
            Ok(h.contains("Healthy") && !h.contains("Unhealthy"))
        },
    )?;
    let recovered = events(c, "DeviceRecovered")?;
    ensure!(
        recovered.contains("gpu-2 is healthy again")
            && recovered.contains("gpu-3 is healthy again"),
        "{recovered}"
    );
    let restarts = workloads::graft_restarts(c).context("graft's restart counts")?;
    ensure!(
        restarts.split_whitespace().all(|n| n.ends_with("=0")),
        "graft restarted: {restarts}"
    );
    c.kubectl(&["delete", "pod", "holder", "waits", "--wait=true"])?;
    Ok(())
}
