//! Which NVLink clique a domain goes to, from graft's ResourceSlices: its IMEX channel
//! devices (`type: imex-channel`) carry the node's clique as the attribute `cliqueID`, and
//! its GPUs say whether the node has room for a domain's workload: a node counts when it has
//! a free channel and a free GPU (or publishes no GPU of graft's, which then cannot judge).
//! A pure function of what the controller's caches hold, so that it is tested without a
//! cluster.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};

use crate::devices::{Role, SliceDevices};

pub use graft_api::attributes::CLIQUE_ID as CLIQUE_ATTRIBUTE;
pub use graft_api::types::IMEX_CHANNEL as CHANNEL_TYPE;
pub use graft_api::DRIVER;

/// A device, as allocations name it: (pool, device) of driver graft.dev.
pub type DeviceId = (String, String);

/// One node's IMEX channels.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeChannels {
    /// Its clique, from its channels' attribute.
    pub clique: String,
    /// Channels that no claim holds.
    pub free: usize,
    /// Every channel.
    pub total: usize,
    /// graft's whole GPUs on the node (`type: gpu`).
    pub gpus: usize,
    /// Those of them no claim holds, whole or in part (a MIG device or share of a GPU
    /// allocated makes the GPU busy).
    pub free_gpus: usize,
}

impl NodeChannels {
    /// Whether a domain's pod has room here: a free channel, and a free GPU unless the
    /// node publishes none of graft's (its GPUs are someone else's to count).
    pub fn has_room(&self) -> bool {
        self.free > 0 && (self.gpus == 0 || self.free_gpus > 0)
    }
}

/// Why no clique can take the domain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoClique {
    /// No node publishes an IMEX channel.
    #[error(
        "no node publishes IMEX channels (graft.dev devices of type imex-channel with a cliqueID)"
    )]
    NoChannels,
    /// Every clique is too small, or too full.
    #[error(
        "no clique has {wanted} nodes with a free IMEX channel and a free GPU (the most: {best} \
         in clique {clique:?})"
    )]
    TooSmall {
        /// numNodes.
        wanted: usize,
        /// The most nodes with a free channel in one clique.
        best: usize,
        /// That clique.
        clique: String,
    },
}

/// The devices that claims hold, of driver graft.dev.
pub fn allocated<'a>(claims: impl IntoIterator<Item = &'a ResourceClaim>) -> HashSet<DeviceId> {
    claims
        .into_iter()
        .filter_map(|c| c.status.as_ref()?.allocation.as_ref()?.devices.as_ref())
        .flat_map(|d| d.results.iter().flatten())
        .filter(|r| r.driver == DRIVER)
        .map(|r| (r.pool.clone(), r.device.clone()))
        .collect()
}

/// Each node's IMEX channels and GPUs, by node name (nodes with channels only). A node
/// whose channels name two cliques (which a node cannot be in) keeps the first it lists.
pub fn node_channels<'a>(
    slices: impl IntoIterator<Item = &'a SliceDevices>,
    allocated: &HashSet<DeviceId>,
) -> BTreeMap<String, NodeChannels> {
    let mut nodes: BTreeMap<String, NodeChannels> = BTreeMap::new();
    // Per node: its GPUs, and the GPUs of which some device is allocated.
    let mut gpus: BTreeMap<&str, (BTreeSet<&str>, HashSet<&str>)> = BTreeMap::new();
    for s in slices {
        let Some(node) = s.node.as_deref() else {
            continue;
        };
        for (name, role) in &s.devices {
            let taken = allocated.contains(&(s.pool.to_string(), name.to_string()));
            let clique = match *role {
                Role::Gpu(i) | Role::Part(i) => {
                    let (all, busy) = gpus.entry(node).or_default();
                    if matches!(role, Role::Gpu(_)) {
                        all.insert(s.gpu(i));
                    }
                    if taken {
                        busy.insert(s.gpu(i));
                    }
                    continue;
                }
                Role::Channel(i) => s.clique(i),
            };
            let n = nodes.entry(node.to_string()).or_default();
            if n.clique.is_empty() {
                n.clique = clique.to_string();
            } else if n.clique != clique {
                continue;
            }
            n.total += 1;
            if !taken {
                n.free += 1;
            }
        }
    }
    for (node, (all, busy)) in gpus {
        if let Some(n) = nodes.get_mut(node) {
            n.gpus = all.len();
            n.free_gpus = all.iter().filter(|g| !busy.contains(*g)).count();
        }
    }
    nodes
}

/// How many nodes of `clique` have room ([`NodeChannels::has_room`]).
pub fn room_in(nodes: &BTreeMap<String, NodeChannels>, clique: &str) -> usize {
    nodes
        .values()
        .filter(|n| n.clique == clique && n.has_room())
        .count()
}

/// The most nodes with room any one clique has: what an elastic domain asks room for, so
/// that it goes where it can grow.
pub fn most_room(nodes: &BTreeMap<String, NodeChannels>) -> usize {
    let mut with_room: BTreeMap<&str, usize> = BTreeMap::new();
    for n in nodes.values().filter(|n| n.has_room()) {
        *with_room.entry(&n.clique).or_default() += 1;
    }
    with_room.into_values().max().unwrap_or(0)
}

/// The clique for a domain of `num_nodes` nodes: the one already chosen, else the smallest
/// clique with that many nodes with room (so that larger cliques stay for larger domains),
/// ties by name.
pub fn choose(
    nodes: &BTreeMap<String, NodeChannels>,
    num_nodes: usize,
    current: Option<&str>,
) -> Result<String, NoClique> {
    if let Some(c) = current.filter(|c| !c.is_empty()) {
        return Ok(c.to_string());
    }
    let mut with_room: BTreeMap<&str, usize> = BTreeMap::new();
    let mut cliques = BTreeSet::new();
    for n in nodes.values() {
        cliques.insert(n.clique.as_str());
        if n.has_room() {
            *with_room.entry(&n.clique).or_default() += 1;
        }
    }
    if cliques.is_empty() {
        return Err(NoClique::NoChannels);
    }
    if let Some((clique, _)) = with_room
        .iter()
        .filter(|(_, n)| **n >= num_nodes)
        .min_by_key(|(c, n)| (**n, **c))
    {
        return Ok(clique.to_string());
    }
    let (clique, best) = with_room
        .iter()
        .max_by_key(|(c, n)| (**n, std::cmp::Reverse(**c)))
        .map(|(c, n)| (c.to_string(), *n))
        .unwrap_or_default();
    Err(NoClique::TooSmall {
        wanted: num_nodes,
        best,
        clique,
    })
}

#[cfg(test)]
mod tests;

/// A ResourceSlice as graft's node plugin publishes IMEX channels: `count` devices
/// `imex-channel-<n>` on `node` (pool = node), each with `type` and `cliqueID`. For tests
/// and fakes.
pub fn channel_slice(node: &str, clique: &str, count: usize) -> ResourceSlice {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-graft.dev-imex")},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": (0..count).map(|i| serde_json::json!({
                "name": format!("imex-channel-{i}"),
                "attributes": {
                    (graft_api::attributes::TYPE): {"string": CHANNEL_TYPE},
                    CLIQUE_ATTRIBUTE: {"string": clique},
                    (graft_api::attributes::CHANNEL): {"int": i},
                }
            })).collect::<Vec<_>>(),
        }
    }))
    .unwrap_or_else(|_| ResourceSlice::default())
}
