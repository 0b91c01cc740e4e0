//! Pods written for NVIDIA's device plugin, unchanged, on graft's GPUs with the chart's
//! defaults: `limits: {nvidia.com/gpu: 2}` and `limits: {nvidia.com/mig-1g.10gb: 1}` (the
//! device plugin's mixed MIG strategy) get devices through the scheduler's extended-resource
//! claims (DRAExtendedResource), only in the container that asked. The fake node's GPU 7
//! starts with a 1g.10gb instance (integration/fake-nvml, mig/state.rs presets). Then the
//! node as the device plugin leaves it (`nvidia.com/gpu: 0` in its status): pods still run
//! on graft's GPUs.

use anyhow::{ensure, Context};
use graft_integration::cluster::workloads::{
    events, set_node_resource, wait_log, wait_unprepared, BUSYBOX,
};
use graft_integration::cluster::Cluster;
use serde_json::Value;

/// Counts the GPU device nodes (`/dev/nvidia<N>`) and MIG capabilities the container sees.
const COUNT: &str = r#"echo "gpus=$(ls /dev | grep -cE '^nvidia[0-9]+$') caps=$(ls /dev/nvidia-caps 2>/dev/null | wc -l) visible=${NVIDIA_VISIBLE_DEVICES-unset}"; echo DONE; sleep 3600"#;

/// A pod whose container `app` asks `limits: {resource: count}`, beside `other`, which
/// asks nothing.
pub fn pod(name: &str, resource: &str, count: u32) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", {COUNT:?}]
    resources: {{limits: {{{resource}: {count}}}}}
  - name: other
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", {COUNT:?}]
"#
    )
}

/// The scheduler's claim for pod `name`, and the devices allocated from it with the
/// profile attribute of each (empty for a full GPU).
pub fn allocation(
    c: &Cluster,
    name: &str,
    resource: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    let pod: Value = serde_json::from_str(&c.kubectl(&["get", "pod", name, "-o", "json"])?)?;
    let status = &pod["status"]["extendedResourceClaimStatus"];
    let claim = status["resourceClaimName"]
        .as_str()
        .with_context(|| format!("{name}: no extendedResourceClaimStatus: {}", pod["status"]))?;
    let mapping = &status["requestMappings"][0];
    ensure!(
        mapping["containerName"] == "app" && mapping["resourceName"] == resource,
        "{name}: {status}"
    );
    let rc: Value =
        serde_json::from_str(&c.kubectl(&["get", "resourceclaim", claim, "-o", "json"])?)?;
    let slices: Value =
        serde_json::from_str(&c.kubectl(&["get", "resourceslices", "-o", "json"])?)?;
    let profile = |dev: &str| -> String {
        slices["items"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
            .find(|d| d["name"] == dev)
            .and_then(|d| {
                d["attributes"]["profile"]["string"]
                    .as_str()
                    .map(str::to_string)
            })
            .unwrap_or_default()
    };
    rc["status"]["allocation"]["devices"]["results"]
        .as_array()
        .with_context(|| format!("{claim} not allocated: {rc}"))?
        .iter()
        .map(|r| {
            ensure!(r["driver"] == "graft.dev", "{claim}: {r}");
            let dev = r["device"].as_str().context("no device")?.to_string();
            let p = profile(&dev);
            Ok((dev, p))
        })
        .collect()
}

pub fn device_plugin_pod_runs_unchanged(c: &Cluster) -> anyhow::Result<()> {
    c.apply(&pod("dp-gpus", "nvidia.com/gpu", 2))?;
    c.apply(&pod("dp-mig", "nvidia.com/mig-1g.10gb", 1))?;
    c.wait_phase("dp-gpus", "Running")?;
    c.wait_phase("dp-mig", "Running")?;

    let gpus = allocation(c, "dp-gpus", "nvidia.com/gpu")?;
    ensure!(
        gpus.len() == 2 && gpus.iter().all(|(_, p)| p.is_empty()),
        "nvidia.com/gpu: 2 got {gpus:?}"
    );
    let log = wait_log(c, "dp-gpus", "app", "DONE")?;
    ensure!(log.contains("gpus=2 "), "dp-gpus/app:\n{log}");
    let other = wait_log(c, "dp-gpus", "other", "DONE")?;
    ensure!(other.contains("gpus=0 caps=0 "), "dp-gpus/other:\n{other}");

    let mig = allocation(c, "dp-mig", "nvidia.com/mig-1g.10gb")?;
    ensure!(
        mig.len() == 1 && mig[0].1 == "1g.10gb",
        "nvidia.com/mig-1g.10gb: 1 got {mig:?}"
    );
    let log = wait_log(c, "dp-mig", "app", "DONE")?;
    ensure!(
        log.contains("gpus=1 ") && !log.contains(" caps=0 "),
        "dp-mig/app sees no MIG device:\n{log}"
    );
    let other = wait_log(c, "dp-mig", "other", "DONE")?;
    ensure!(other.contains("gpus=0 caps=0 "), "dp-mig/other:\n{other}");

    // Serving nvidia.com/gpu is not a device plugin: graft withheld nothing.
    let beside = events(c, "DevicePluginBesideGraft")?;
    ensure!(beside.trim().is_empty(), "{beside}");
    println!("nvidia.com/gpu: 2 -> {gpus:?}; nvidia.com/mig-1g.10gb: 1 -> {mig:?}");

    c.kubectl(&["delete", "pod", "dp-gpus", "dp-mig", "--wait=true"])?;
    wait_unprepared(c)?;
    let zero = after_the_device_plugin(c);
    let cleanup = node_resource(c, None);
    zero.and(cleanup)
}

/// The Node's `nvidia.com/gpu`, set or removed.
fn node_resource(c: &Cluster, count: Option<u32>) -> anyhow::Result<()> {
    let node = c.kubectl(&["get", "nodes", "-o", "jsonpath={.items[0].metadata.name}"])?;
    set_node_resource(c, node.trim(), "nvidia.com/gpu", count)
}

/// A node the device plugin served keeps `nvidia.com/gpu: 0` once it is gone (the kubelet
/// writes 0 for a removed device plugin's resource instead of deleting it): graft's guard
/// publishes its GPUs there, and the scheduler serves the pod from them.
fn after_the_device_plugin(c: &Cluster) -> anyhow::Result<()> {
    node_resource(c, Some(0))?;
    c.apply(&pod("dp-zero", "nvidia.com/gpu", 1))?;
    c.wait_phase("dp-zero", "Running")?;
    let got = allocation(c, "dp-zero", "nvidia.com/gpu")?;
    ensure!(
        got.len() == 1,
        "nvidia.com/gpu: 1 beside a zero got {got:?}"
    );
    let log = wait_log(c, "dp-zero", "app", "DONE")?;
    ensure!(log.contains("gpus=1 "), "dp-zero/app:\n{log}");
    c.kubectl(&["delete", "pod", "dp-zero", "--wait=true"])?;
    wait_unprepared(c)
}
