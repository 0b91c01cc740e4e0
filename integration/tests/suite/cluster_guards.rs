//! graft's guards on the cluster, with the GPU setup as shipped on the fake NVIDIA node (the
//! GPU bed of `graft_integration::cluster::gpu`, shared with cluster_gpu): a node whose
//! graft-nri is gone offers no devices, a device plugin's `nvidia.com/gpu` on the Node makes
//! graft withhold its GPUs, and a GPU that goes bad under a pod says why in the pod's
//! status.
//!
//! Needs root, the testbed and the workspace binaries, as cluster_e2e does.

mod restricted;

use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_integration::cluster::gpu::{with_bed, GpuValues, FAKE_DIR};
use graft_integration::cluster::workloads::{
    self, device_pod, events, graft_ready, published_devices, taints, wait_log,
};
use graft_integration::cluster::{wait_until, Cluster};

/// The node's name in the testbed (cluster.sh's default GRAFT_NODE_NAME).
const NODE: &str = "graft-node";

/// graft-nri's grace period in these tests (`GRAFT_NRI_EVENT_GRACE_SECONDS`, 30 s by
/// default), short so that the test is.
const NRI_GRACE_S: u64 = 5;

/// How often graft-driver looks at its Node for device plugin resources in these tests
/// (`GRAFT_DEVICE_PLUGIN_CHECK_SECONDS`, 30 s by default), short so that the tests are.
const PLUGIN_CHECK_S: u64 = 5;

/// The GPU setup's values with graft-driver's grace for graft-nri shortened.
fn short_nri_grace() -> GpuValues {
    driver_env("GRAFT_NRI_EVENT_GRACE_SECONDS", NRI_GRACE_S)
}

/// The GPU setup's values with graft-driver's look at its Node for device plugins made
/// more often.
fn short_plugin_check() -> GpuValues {
    driver_env("GRAFT_DEVICE_PLUGIN_CHECK_SECONDS", PLUGIN_CHECK_S)
}

/// The GPU setup's values with `name=value` in graft-driver's environment. The list replaces
/// deploy-graft.sh's `driverExtraEnv`, so it repeats the fake node's roots.
fn driver_env(name: &str, value: u64) -> GpuValues {
    let env = format!(
        r#"driverExtraEnv=[{{"name":"GRAFT_PROC_ROOT","value":"/host{FAKE_DIR}/proc"}},{{"name":"GRAFT_SYSFS_ROOT","value":"/host{FAKE_DIR}/sys"}},{{"name":"{name}","value":"{value}"}}]"#
    );
    GpuValues {
        helm: vec!["--set-json".into(), env],
        ..Default::default()
    }
}

/// The PodScheduled condition of `pod`, as `reason: message`.
fn scheduling(c: &Cluster, pod: &str) -> anyhow::Result<String> {
    c.kubectl(&[
        "get",
        "pod",
        pod,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].reason}: {.status.conditions[?(@.type==\"PodScheduled\")].message}",
    ])
}

const NRI_TAINT: &str = "graft.dev/nri-unavailable=not-connected:NoSchedule\n";

#[test]
fn nri_unavailable_taints_devices() -> anyhow::Result<()> {
    with_bed(|bed| {
        bed.fresh(&short_nri_grace(), |_| Ok(()))?;
        let c = &bed.cluster;
        graft_ready(c)?;
        // With a 5 s grace, graft-driver may taint its devices before graft-nri's pod has
        // connected after the install; the taint must go once graft-nri is up.
        wait_until("fuse still tainted once graft was ready", || {
            Ok(taints(c, "fuse")?.is_empty())
        })?;
        {
            let _down = c.hold_down("graft-nri");
            // hold_down waited 2 s for the kill to land.
            let start = Instant::now() - Duration::from_secs(2);
            wait_until("fuse never tainted nri-unavailable", || {
                Ok(taints(c, "fuse")? == NRI_TAINT)
            })?;
            let took = start.elapsed();
            println!("graft-nri killed to nri-unavailable taint on fuse: {took:?}");
            // The check runs every grace/2; the publisher then writes the slice.
            ensure!(
                took < Duration::from_secs(NRI_GRACE_S * 3),
                "the taint took {took:?} with a {NRI_GRACE_S} s grace"
            );
            // Every published device carries it, GPUs included.
            for d in published_devices(c)? {
                ensure!(taints(c, &d)?.contains(NRI_TAINT), "{d} is not tainted");
            }
            // A new pod with a claim is not scheduled here, and the scheduler says why.
            c.apply(&device_pod("nri-wait", "fuse.graft.dev", "/dev/fuse"))?;
            wait_until("nri-wait was never found unschedulable", || {
                let s = scheduling(c, "nri-wait")?;
                Ok(s.starts_with("Unschedulable:") && s.contains("cannot allocate all claims"))
            })?;
            println!("nri-wait: {}", scheduling(c, "nri-wait")?);
            ensure!(c.pod_phase("nri-wait") == "Pending");
        }
        // graft-nri back (the kubelet restarts it): the taint goes and the pod runs.
        let start = Instant::now();
        wait_until("the nri-unavailable taint never went", || {
            Ok(taints(c, "fuse")?.is_empty())
        })?;
        println!("graft-nri let up to taint gone: {:?}", start.elapsed());
        c.wait_phase("nri-wait", "Running")?;
        wait_log(c, "nri-wait", "app", "open-ok")?;
        c.kubectl(&["delete", "pod", "nri-wait", "--wait=true"])?;
        workloads::wait_unprepared(c)
    })
}

/// Whether any NVIDIA GPU (whole, MIG or VFIO) is published.
fn gpus_published(c: &Cluster) -> anyhow::Result<bool> {
    Ok(published_devices(c)?.iter().any(|d| d.starts_with("gpu-")))
}

/// Sets (`Some(n)`) or removes the device plugin's resource on the Node's status, the way
/// an extended resource is advertised by hand (a status patch; the kubelet keeps resources
/// it does not manage).
fn device_plugin_resource(c: &Cluster, count: Option<u32>) -> anyhow::Result<()> {
    node_resource(c, "nvidia.com/gpu", count)
}

/// Sets or removes extended resource `name` on the Node's status, as above.
fn node_resource(c: &Cluster, name: &str, count: Option<u32>) -> anyhow::Result<()> {
    workloads::set_node_resource(c, NODE, name, count)
}

#[test]
fn device_plugin_beside_graft_is_refused() -> anyhow::Result<()> {
    with_bed(|bed| {
        bed.fresh(&short_plugin_check(), |_| Ok(()))?;
        let c = &bed.cluster;
        ensure!(
            gpus_published(c)?,
            "no GPU published before the device plugin"
        );
        let result = (|| {
            device_plugin_resource(c, Some(8))?;
            // graft-driver looks at its Node every PLUGIN_CHECK_S here.
            let start = Instant::now();
            wait_until("no DevicePluginBesideGraft Event on the Node", || {
                Ok(events(c, "DevicePluginBesideGraft")?
                    .lines()
                    .any(|l| l.starts_with("Node") && l.contains("nvidia.com/gpu")))
            })?;
            wait_until("the GPUs were never withheld", || Ok(!gpus_published(c)?))?;
            println!(
                "device plugin resource to GPUs withheld: {:?}",
                start.elapsed()
            );
            let left = published_devices(c)?;
            ensure!(
                left.iter().any(|d| d == "fuse"),
                "graft's other devices went too: {left:?}"
            );
            device_plugin_resource(c, None)?;
            let start = Instant::now();
            wait_until("no DevicePluginGone Event on the Node", || {
                Ok(events(c, "DevicePluginGone")?
                    .lines()
                    .any(|l| l.starts_with("Node")))
            })?;
            wait_until("the GPUs never came back", || gpus_published(c))?;
            println!(
                "device plugin resource gone to GPUs back: {:?}",
                start.elapsed()
            );
            Ok(())
        })();
        // The Node is the bed's: never leave the resource on it for the next test.
        let cleanup = device_plugin_resource(c, None);
        result.and(cleanup)
    })
}

/// NVIDIA's Network Operator advertises its NIC resources under `nvidia.com/` too (SR-IOV
/// functions as `nvidia.com/hostdev`, shared RDMA devices): on a GPU node running graft as
/// shipped, they withhold no GPU and post no Event.
#[test]
fn network_operator_resources_withhold_nothing() -> anyhow::Result<()> {
    with_bed(|bed| {
        bed.fresh(&short_plugin_check(), |_| Ok(()))?;
        let c = &bed.cluster;
        ensure!(gpus_published(c)?, "no GPU published to begin with");
        const NICS: [&str; 2] = ["nvidia.com/hostdev", "nvidia.com/rdma_shared_device_a"];
        // Another test on this bed may have left its Event: only a new one counts.
        let before = events(c, "DevicePluginBesideGraft")?;
        let result = (|| {
            for nic in NICS {
                node_resource(c, nic, Some(4))?;
            }
            // graft-driver looks at its Node every PLUGIN_CHECK_S: three looks and a little.
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(3 * PLUGIN_CHECK_S + 2) {
                ensure!(
                    gpus_published(c)?,
                    "GPUs withheld for the Network Operator's resources after {:?}",
                    start.elapsed()
                );
                std::thread::sleep(Duration::from_secs(1));
            }
            let after = events(c, "DevicePluginBesideGraft")?;
            ensure!(
                after == before,
                "a Warning Event for NIC resources: {after}"
            );
            Ok(())
        })();
        // The Node is the bed's: never leave the resources on it for the next test.
        let mut cleanup = Ok(());
        for nic in NICS {
            cleanup = cleanup.and(node_resource(c, nic, None));
        }
        result.and(cleanup)
    })
}

/// A pod whose container uses the GPU at PCI address `bus`.
fn pinned_gpu_pod(name: &str, bus: &str) -> String {
    let cel = format!(r#"device.attributes["graft.dev"].pciBusID == "{bus}""#);
    workloads::claim_template(name, "gpu.graft.dev", Some(&cel))
        + &workloads::one_claim_pod(name, "gpu", "echo started; sleep 3600")
}

/// The kubelet's health entries for the pod's devices, as `health|message` lines.
fn device_health(c: &Cluster, pod: &str) -> anyhow::Result<String> {
    c.kubectl(&[
        "get",
        "pod",
        pod,
        "-o",
        "jsonpath={range .status.containerStatuses[*].allocatedResourcesStatus[*].resources[*]}{.health}|{.message}{\"\\n\"}{end}",
    ])
}

#[test]
fn unhealthy_gpu_reason_in_pod_status() -> anyhow::Result<()> {
    with_bed(|bed| {
        bed.fresh(&GpuValues::default(), |_| Ok(()))?;
        let c = &bed.cluster;
        // NVML index 1 is gpu-3 at bus 0x2a.
        c.apply(&pinned_gpu_pod("sick", "0000:2a:00.0"))?;
        c.wait_phase("sick", "Running")?;
        wait_until("the pod's GPU never showed healthy in its status", || {
            Ok(device_health(c, "sick")?.contains("Healthy|"))
        })?;
        bed.node.inject("1 xid 79")?;
        let start = Instant::now();
        wait_until("the pod's status never showed its GPU unhealthy", || {
            Ok(device_health(c, "sick")?.contains("Unhealthy|"))
        })?;
        let h = device_health(c, "sick")?;
        println!("XID 79 to pod status ({:?}): {h}", start.elapsed());
        let line = h
            .lines()
            .find(|l| l.starts_with("Unhealthy|"))
            .context("no Unhealthy entry")?;
        // graft's reason and its text, as the kubelet got them from field 5 (`message`).
        ensure!(
            line.contains("XID 79") && line.contains("xid-79"),
            "the reason is not in the pod's status: {h}"
        );
        ensure!(c.pod_phase("sick") == "Running", "the pod stopped");
        c.kubectl(&["delete", "pod", "sick", "--wait=true"])?;
        workloads::wait_unprepared(c)
    })
}
