//! The simulated nodes: Node objects written Ready once, each with the ResourceSlices of
//! its shape, made concurrently, a bounded number of requests at a time.

use std::net::Ipv4Addr;

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::shapes::{Shape, Shapes};

/// The label every simulated node carries.
pub const SIM_LABEL: &str = "graft.dev/fleet-sim";
/// The node label the pools are told apart by (the extender's default `--pool-label`).
pub const POOL_LABEL: &str = "node.kubernetes.io/instance-type";
/// Requests in flight while the fleet is made.
const IN_FLIGHT: usize = 24;

/// One simulated node.
#[derive(Debug, Clone)]
pub struct SimNode {
    /// Its name, `sim-<index>`.
    pub name: String,
    /// Its shape.
    pub shape: Shape,
    /// Its NVL72 rack (clique), for [`Shape::Nvl72`].
    pub rack: usize,
}

impl SimNode {
    /// Its node pool (the [`POOL_LABEL`] value).
    pub fn pool(&self) -> &'static str {
        match self.shape {
            Shape::Hgx => "hgx-h100",
            Shape::HgxMig => "hgx-h100-mig",
            Shape::Nvl72 => "nvl72-gb200",
        }
    }
}

/// The address of node number `i`.
pub fn address(i: usize) -> Ipv4Addr {
    let i = i as u32;
    Ipv4Addr::new(10, 64 + ((i >> 16) & 0x3f) as u8, (i >> 8) as u8, i as u8)
}

/// The address of a simulated node by name, if it is one.
pub fn address_of(name: &str) -> Option<Ipv4Addr> {
    name.strip_prefix("sim-")?.parse().ok().map(address)
}

/// A fleet of `n` nodes: a quarter NVL72 trays in whole racks of 18, a tenth HGX boards
/// with a MIG GPU, the rest plain HGX boards.
pub fn plan(n: usize) -> Vec<SimNode> {
    let racks = n / 4 / 18;
    let mig = n / 10;
    (0..n)
        .map(|i| {
            let (shape, rack) = if i < racks * 18 {
                (Shape::Nvl72, i / 18)
            } else if i < racks * 18 + mig {
                (Shape::HgxMig, 0)
            } else {
                (Shape::Hgx, 0)
            };
            SimNode {
                name: format!("sim-{i:05}"),
                shape,
                rack,
            }
        })
        .collect()
}

/// `count` more NVL trays, named on from node number `first`, all in the one clique of
/// rack `rack`: a clique wider than a rack's 18 trays (fifth-generation NVLink reaches 576
/// GPUs in one domain across racks, 144 trays; 256 is beyond that), so that one clique
/// holds a 64- or 256-node ComputeDomain.
/// It measures graft's controller, the scheduler and the DaemonSet controller at that size,
/// not IMEX, which no simulated node runs.
pub fn wide_clique(first: usize, count: usize, rack: usize) -> Vec<SimNode> {
    (first..first + count)
        .map(|i| SimNode {
            name: format!("sim-{i:05}"),
            shape: Shape::Nvl72,
            rack,
        })
        .collect()
}

async fn make_one(
    client: &kube::Client,
    shapes: &Shapes,
    i: usize,
    n: &SimNode,
) -> anyhow::Result<usize> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut node: Node = serde_json::from_value(json!({
        "metadata": {"name": n.name, "labels": {
            "kubernetes.io/hostname": n.name,
            "kubernetes.io/os": "linux",
            POOL_LABEL: n.pool(),
            SIM_LABEL: "true",
        }},
    }))?;
    // The clique label graft-driver sets on a node with IMEX channels
    // (families/nvidia/src/domain/clique_label.rs, with ComputeDomains on).
    if let (Some(clique), Some(labels)) = (
        shapes.clique(n.shape, n.rack),
        node.metadata.labels.as_mut(),
    ) {
        labels.insert(graft_api::compute_domain::CLIQUE_LABEL.into(), clique);
    }
    let made = nodes
        .create(&PostParams::default(), &node)
        .await
        .with_context(|| format!("creating Node {}", n.name))?;
    let now = chrono_now();
    let resources = json!({"cpu": "192", "memory": "2Ti", "pods": "110"});
    let status = json!({"status": {
        "capacity": resources, "allocatable": resources,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "simulated", "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "addresses": [{"type": "InternalIP",
            "address": address_of(&n.name).unwrap_or(address(i)).to_string()},
            {"type": "Hostname", "address": n.name}],
    }});
    nodes
        .patch_status(&n.name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .with_context(|| format!("writing Node {} Ready", n.name))?;
    let uid = made.metadata.uid.unwrap_or_default();
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let mut count = 0;
    for s in shapes.slices(n.shape, &n.name, &uid, n.rack) {
        slices
            .create(&PostParams::default(), &s)
            .await
            .with_context(|| format!("publishing {}'s slices", n.name))?;
        count += 1;
    }
    Ok(count)
}

/// Now, as the API writes times (RFC 3339, whole seconds).
fn chrono_now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// Makes every node of `plan` with its slices; the number of slices published.
pub async fn make(
    client: &kube::Client,
    shapes: &Shapes,
    plan: &[SimNode],
) -> anyhow::Result<usize> {
    let counts: Vec<usize> = futures::stream::iter(plan.iter().enumerate())
        .map(|(i, n)| make_one(client, shapes, i, n))
        .buffer_unordered(IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(counts.into_iter().sum())
}

/// Waits until no simulated node has a taint left (the node lifecycle controller lifts
/// the `not-ready` one admission put on each new Node once it sees it Ready).
pub async fn wait_untainted(
    client: &kube::Client,
    limit: std::time::Duration,
) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let start = std::time::Instant::now();
    loop {
        let full = nodes
            .list(&ListParams::default().labels(&format!("{SIM_LABEL}=true")))
            .await?;
        let tainted = full
            .items
            .iter()
            .filter(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|t| !t.is_empty())
            })
            .count();
        let total = full.items.len();
        if tainted == 0 && total > 0 {
            return Ok(());
        }
        anyhow::ensure!(
            start.elapsed() < limit,
            "{tainted} of {total} simulated nodes still tainted after {limit:?}"
        );
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    }
}
