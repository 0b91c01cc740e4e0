//! NVIDIA's device plugin beside graft: graft-driver with the nvidia backend on a fake node,
//! against a real kube-apiserver. While the Node's capacity lists `nvidia.com/gpu` (as the
//! device plugin advertises it, written here into the Node's status as the kubelet would),
//! graft's GPUs leave its ResourceSlices, the other devices stay, and a Warning Event on the
//! Node says why; when the resource goes, the GPUs come back with a Normal Event. With
//! `--allow-device-plugin-coexistence` nothing is withheld, and NVIDIA's resources that are
//! not GPUs (the Network Operator's) withhold nothing unless named as a GPU plugin's.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::ensure;
use graft_integration::apiserver;
use graft_integration::dra_node::DraNode;
use graft_integration::fake_gpu::FakeNode;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

/// How long a change of the Node takes to show, at most: a rescan and a publish, which a
/// loaded CI machine (two release builds beside the tests) has stretched past 30 s.
const WAIT: Duration = Duration::from_secs(90);

async fn names(c: &kube::Client, node: &str) -> anyhow::Result<Vec<String>> {
    let api: Api<ResourceSlice> = Api::all(c.clone());
    let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
    let mut n: Vec<String> = api
        .list(&lp)
        .await?
        .items
        .iter()
        .flat_map(|s| s.spec.devices.iter().flatten().map(|d| d.name.clone()))
        .collect();
    n.sort();
    Ok(n)
}

async fn wait_names(
    c: &kube::Client,
    node: &str,
    what: &str,
    ok: impl Fn(&[String]) -> bool,
) -> anyhow::Result<Vec<String>> {
    let start = Instant::now();
    loop {
        let n = names(c, node).await?;
        if ok(&n) {
            return Ok(n);
        }
        ensure!(start.elapsed() < WAIT, "{what}: {n:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn reasons(c: &kube::Client, node: &str) -> anyhow::Result<Vec<String>> {
    let api: Api<Event> = Api::namespaced(c.clone(), "default");
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node))
        .filter_map(|e| e.reason)
        .collect())
}

async fn set_capacity(c: &kube::Client, node: &str, gpus: Option<&str>) -> anyhow::Result<()> {
    set_resource(c, node, "nvidia.com/gpu", gpus).await
}

/// Sets (or, with `None`, removes) extended resource `name` in the Node's status.
async fn set_resource(
    c: &kube::Client,
    node: &str,
    name: &str,
    count: Option<&str>,
) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(c.clone());
    let status = json!({"status": {"capacity": {name: count}, "allocatable": {name: count}}});
    nodes
        .patch_status(node, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

fn args(fake: &FakeNode, hook: &Path, source: &Path, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "--discovery",
        "char,nvidia",
        "--device-plugin-check-seconds",
        "1",
    ]
    .map(String::from)
    .into();
    a.extend(fake.nvidia_args(hook, source));
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

const DEVICES: &str = "[[devices]]\npath = \"/dev/null\"\nattributes = { type = \"test\" }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpus_are_withheld_beside_a_device_plugin() -> anyhow::Result<()> {
    let dir = tempfile::Builder::new().prefix("gdp").tempdir_in("/tmp")?;
    let fake = FakeNode::create(dir.path())?;
    let hook = dir.path().join("bin/graft-hook");
    let source = graft_integration::testbed::static_hook()?;
    let a = args(&fake, &hook, &source, &[]);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let cp = apiserver::shared()?;
    let dra = DraNode::start_with(cp, "dp-node", DEVICES, &a).await?;
    let c = dra.client.clone();
    let gpus = |n: &[String]| n.iter().any(|d| d.starts_with("gpu-"));

    wait_names(&c, "dp-node", "the GPUs published", gpus).await?;
    set_capacity(&c, "dp-node", Some("2")).await?;
    let left = wait_names(&c, "dp-node", "the GPUs withheld", |n| {
        !gpus(n) && !n.is_empty()
    })
    .await?;
    ensure!(left.iter().all(|d| !d.starts_with("vfio-")), "{left:?}");
    let start = Instant::now();
    while !reasons(&c, "dp-node")
        .await?
        .iter()
        .any(|r| r == "DevicePluginBesideGraft")
    {
        ensure!(start.elapsed() < WAIT, "no Warning Event on the Node");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    set_capacity(&c, "dp-node", None).await?;
    wait_names(&c, "dp-node", "the GPUs back", gpus).await?;
    let start = Instant::now();
    while !reasons(&c, "dp-node")
        .await?
        .iter()
        .any(|r| r == "DevicePluginGone")
    {
        ensure!(start.elapsed() < WAIT, "no Normal Event on the Node");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(dra);

    // Allowed: the GPUs stay beside the device plugin's resource.
    set_capacity(&c, "dp-node-2", None).await.ok();
    let a = args(
        &fake,
        &hook,
        &source,
        &["--allow-device-plugin-coexistence"],
    );
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let dra = DraNode::start_with(cp, "dp-node-2", DEVICES, &a).await?;
    set_capacity(&c, "dp-node-2", Some("2")).await?;
    wait_names(&c, "dp-node-2", "the GPUs published", gpus).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(
        gpus(&names(&c, "dp-node-2").await?),
        "GPUs withheld although allowed"
    );
    drop(dra);
    Ok(())
}

/// The Network Operator's resources (a NIC's virtual functions, RDMA devices) share the
/// `nvidia.com/` prefix with the GPU device plugin's: they withhold nothing. A GPU plugin
/// that renamed its resource does, once `--device-plugin-resources` names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nic_resources_keep_the_gpus_and_a_named_gpu_resource_does_not() -> anyhow::Result<()> {
    let dir = tempfile::Builder::new().prefix("gdn").tempdir_in("/tmp")?;
    let fake = FakeNode::create(dir.path())?;
    let hook = dir.path().join("bin/graft-hook");
    let source = graft_integration::testbed::static_hook()?;
    let a = args(
        &fake,
        &hook,
        &source,
        &["--device-plugin-resources", "example.com/gpu-*"],
    );
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let cp = apiserver::shared()?;
    let node = "dp-node-nic";
    let dra = DraNode::start_with(cp, node, DEVICES, &a).await?;
    let c = dra.client.clone();
    let gpus = |n: &[String]| n.iter().any(|d| d.starts_with("gpu-"));
    wait_names(&c, node, "the GPUs published", gpus).await?;
    for nic in ["nvidia.com/hostdev", "nvidia.com/rdma_shared_device_a"] {
        set_resource(&c, node, nic, Some("4")).await?;
    }
    // Five looks at the Node (every second) with the NIC resources on it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    ensure!(
        gpus(&names(&c, node).await?),
        "GPUs withheld for the Network Operator's resources"
    );
    ensure!(
        !reasons(&c, node)
            .await?
            .iter()
            .any(|r| r == "DevicePluginBesideGraft"),
        "a Warning Event for the Network Operator's resources"
    );
    set_resource(&c, node, "example.com/gpu-a100", Some("8")).await?;
    wait_names(&c, node, "the GPUs withheld for the named resource", |n| {
        !gpus(n) && !n.is_empty()
    })
    .await?;
    drop(dra);
    Ok(())
}
