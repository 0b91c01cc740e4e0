//! What each node has now, from graft's ResourceSlices and the allocated ResourceClaims:
//! its whole GPUs, each with its NVLink island and whether a claim holds it.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::resource::v1::{Device, ResourceClaim, ResourceSlice};

pub use graft_api::attributes::NVLINK_ISLAND as ISLAND;
use graft_api::attributes::{MIG_ENABLED, TYPE};

/// One whole GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// The device's name in its slice.
    pub name: String,
    /// Its NVLink island, when NVLink joins it to another GPU.
    pub island: Option<String>,
    /// A claim holds it (whole, or a share of it).
    pub used: bool,
}

/// One node's GPUs, in slice order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeGpus {
    /// The node's whole GPUs.
    pub gpus: Vec<Gpu>,
}

impl NodeGpus {
    /// How many GPUs no claim holds.
    pub fn free(&self) -> usize {
        self.gpus.iter().filter(|g| !g.used).count()
    }

    /// Free GPUs per NVLink island, by island.
    pub fn free_by_island(&self) -> BTreeMap<&str, usize> {
        let mut out = BTreeMap::new();
        for g in self.gpus.iter().filter(|g| !g.used) {
            if let Some(i) = &g.island {
                *out.entry(i.as_str()).or_insert(0) += 1;
            }
        }
        out
    }
}

pub(crate) fn string_attr<'a>(d: &'a Device, domain: &str, name: &str) -> Option<&'a str> {
    let attrs = d.attributes.as_ref()?;
    // Unqualified names are in the driver's domain; the qualified form means the same.
    attrs
        .get(name)
        .or_else(|| attrs.get(&format!("{domain}/{name}")))?
        .string
        .as_deref()
}

fn bool_attr(d: &Device, domain: &str, name: &str) -> bool {
    d.attributes
        .as_ref()
        .and_then(|a| a.get(name).or_else(|| a.get(&format!("{domain}/{name}"))))
        .and_then(|v| v.bool)
        .unwrap_or(false)
}

/// Whether `d` is a whole GPU offered as one (`type` gpu, MIG off).
pub(crate) fn whole_gpu(d: &Device, driver: &str) -> bool {
    string_attr(d, driver, TYPE) == Some(graft_api::types::GPU)
        && !bool_attr(d, driver, MIG_ENABLED)
}

/// Every node's whole GPUs from `driver`'s slices, marked used where a claim in `claims`
/// holds them. Slices of an older pool generation than the newest seen are ignored, as
/// the scheduler ignores them.
pub fn nodes<'a>(
    driver: &str,
    slices: impl IntoIterator<Item = &'a ResourceSlice>,
    claims: impl IntoIterator<Item = &'a ResourceClaim>,
) -> BTreeMap<String, NodeGpus> {
    let slices: Vec<&ResourceSlice> = slices.into_iter().collect();
    let mut newest: BTreeMap<&str, i64> = BTreeMap::new();
    for s in slices.iter().filter(|s| s.spec.driver == driver) {
        let g = newest.entry(s.spec.pool.name.as_str()).or_insert(i64::MIN);
        *g = (*g).max(s.spec.pool.generation);
    }
    let used: BTreeSet<(&str, &str)> = claims
        .into_iter()
        .filter_map(|c| c.status.as_ref()?.allocation.as_ref()?.devices.as_ref())
        .flat_map(|d| d.results.iter().flatten())
        .filter(|r| r.driver == driver)
        .map(|r| (r.pool.as_str(), r.device.as_str()))
        .collect();
    let mut out: BTreeMap<String, NodeGpus> = BTreeMap::new();
    let mut ordered: Vec<&ResourceSlice> = slices
        .iter()
        .copied()
        .filter(|s| {
            s.spec.driver == driver
                && newest.get(s.spec.pool.name.as_str()) == Some(&s.spec.pool.generation)
        })
        .collect();
    // A stable order, so that equal inputs give equal answers.
    ordered.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for s in ordered {
        let Some(node) = &s.spec.node_name else {
            continue;
        };
        let entry = out.entry(node.clone()).or_default();
        for d in s
            .spec
            .devices
            .iter()
            .flatten()
            .filter(|d| whole_gpu(d, driver))
        {
            entry.gpus.push(Gpu {
                name: d.name.clone(),
                island: string_attr(d, driver, ISLAND).map(str::to_string),
                used: used.contains(&(s.spec.pool.name.as_str(), d.name.as_str())),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests;
