//! What a pod asks of graft's GPUs: how many whole GPUs its claims that are not yet
//! allocated request, and whether they must share one NVLink island.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;

/// A pod's demand for whole GPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Demand {
    /// Whole GPUs requested by claims not yet allocated.
    pub gpus: usize,
    /// The largest request that must sit on one NVLink island (a `matchAttribute` on the
    /// island over it), 0 when none must.
    pub one_island: usize,
    /// Claims the pod names that are not in the cache yet (the scheduler waits for them;
    /// until then the demand is incomplete).
    pub unknown_claims: usize,
}

/// The pod's claims' names, in the pod's order: a direct `resourceClaimName`, or the name
/// the claim made from a template got (`status.resourceClaimStatuses`).
pub fn claim_names(pod: &Pod) -> Vec<String> {
    let made: BTreeMap<&str, &str> = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|s| Some((s.name.as_str(), s.resource_claim_name.as_deref()?)))
        .collect();
    pod.spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|rc| {
            rc.resource_claim_name
                .clone()
                .or_else(|| made.get(rc.name.as_str()).map(|s| s.to_string()))
        })
        .collect()
}

/// The demand of `pod` given the claims of its namespace (`claim(name)`), counting the
/// requests whose device class is one of `classes` (whole GPUs). `island_attribute` is the
/// qualified attribute name of the island (`graft.dev/nvlinkIsland`).
pub fn of_pod<'a>(
    pod: &Pod,
    claim: impl Fn(&str) -> Option<&'a ResourceClaim>,
    classes: &[String],
    island_attribute: &str,
) -> Demand {
    let mut d = Demand::default();
    for name in claim_names(pod) {
        let Some(c) = claim(&name) else {
            d.unknown_claims += 1;
            continue;
        };
        if c.status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .is_some()
        {
            continue;
        }
        let Some(devices) = &c.spec.devices else {
            continue;
        };
        let mut per_request: BTreeMap<&str, usize> = BTreeMap::new();
        for r in devices.requests.iter().flatten() {
            let Some(count) = request_gpus(r, classes) else {
                continue;
            };
            per_request.insert(r.name.as_str(), count);
            d.gpus += count;
        }
        for con in devices.constraints.iter().flatten() {
            if con.match_attribute.as_deref() != Some(island_attribute) {
                continue;
            }
            // No requests listed: the constraint covers them all.
            let covered: usize = match &con.requests {
                Some(names) if !names.is_empty() => names
                    .iter()
                    .filter_map(|n| per_request.get(n.as_str()))
                    .sum(),
                _ => per_request.values().sum(),
            };
            d.one_island = d.one_island.max(covered);
        }
    }
    d
}

/// The whole GPUs request `r` takes: its count when it asks for one of `classes` by count;
/// for `firstAvailable`, the fewest any alternative takes when every alternative is such a
/// request (graft's island preference makes `[island, any]` of one request: the same GPUs
/// either way), none otherwise, since the scheduler may pick one graft does not serve.
fn request_gpus(
    r: &k8s_openapi::api::resource::v1::DeviceRequest,
    classes: &[String],
) -> Option<usize> {
    let by_count = |class: &String, mode: Option<&str>, count: Option<i64>| {
        // "All" takes what the node has: no count to place by.
        (classes.contains(class) && mode != Some("All")).then(|| count.unwrap_or(1).max(0) as usize)
    };
    if let Some(x) = &r.exactly {
        return by_count(&x.device_class_name, x.allocation_mode.as_deref(), x.count);
    }
    r.first_available
        .iter()
        .flatten()
        .map(|a| by_count(&a.device_class_name, a.allocation_mode.as_deref(), a.count))
        .collect::<Option<Vec<usize>>>()?
        .into_iter()
        .min()
}

#[cfg(test)]
mod tests;
