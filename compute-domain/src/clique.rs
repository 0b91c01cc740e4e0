//! Which NVLink clique a domain goes to, from graft's ResourceSlices: its IMEX channel
//! devices (`type: imex-channel`) carry the node's clique as the attribute `cliqueID`.
//! A pure function of what the controller listed, so that it is tested without a cluster.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use k8s_openapi::api::resource::v1::{Device, ResourceClaim, ResourceSlice};

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
    #[error("no clique has {wanted} nodes with a free IMEX channel (the most: {best} in clique {clique:?})")]
    TooSmall {
        /// numNodes.
        wanted: usize,
        /// The most nodes with a free channel in one clique.
        best: usize,
        /// That clique.
        clique: String,
    },
}

/// An attribute by its name as a slice may spell it: bare (the driver's own domain) or
/// qualified with the driver's name.
fn string_attribute<'a>(device: &'a Device, name: &str) -> Option<&'a str> {
    let attrs = device.attributes.as_ref()?;
    attrs
        .get(name)
        .or_else(|| attrs.get(&graft_api::attributes::qualified(name)))
        .and_then(|a| a.string.as_deref())
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

/// Each node's IMEX channels, by node name. A node whose channels name two cliques (which
/// a node cannot be in) keeps the first it lists.
pub fn node_channels<'a>(
    slices: impl IntoIterator<Item = &'a ResourceSlice>,
    allocated: &HashSet<DeviceId>,
) -> BTreeMap<String, NodeChannels> {
    let mut nodes: BTreeMap<String, NodeChannels> = BTreeMap::new();
    for s in slices.into_iter().filter(|s| s.spec.driver == DRIVER) {
        let Some(node) = s.spec.node_name.as_deref() else {
            continue;
        };
        for d in s.spec.devices.iter().flatten() {
            if string_attribute(d, graft_api::attributes::TYPE) != Some(CHANNEL_TYPE) {
                continue;
            }
            let Some(clique) = string_attribute(d, CLIQUE_ATTRIBUTE).filter(|c| !c.is_empty())
            else {
                continue;
            };
            let n = nodes.entry(node.to_string()).or_default();
            if n.clique.is_empty() {
                n.clique = clique.to_string();
            } else if n.clique != clique {
                continue;
            }
            n.total += 1;
            if !allocated.contains(&(s.spec.pool.name.clone(), d.name.clone())) {
                n.free += 1;
            }
        }
    }
    nodes
}

/// The clique for a domain of `num_nodes` nodes: the one already chosen, else the smallest
/// clique with that many nodes with a free channel (so that larger cliques stay for larger
/// domains), ties by name.
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
        if n.free > 0 {
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
