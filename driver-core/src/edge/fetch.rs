//! Reading the claims of a call and the pods they are reserved for from the API server.
//!
//! Every claim is read with its own GET, so nothing is stale: a GET without
//! `resourceVersion` is served from etcd by a quorum read. A pod comes from the node's pod
//! cache where that cannot differ from a GET (`pods.rs` says when), else from a GET the API
//! server answers from its watch cache under the same rule, else from a quorum GET.
//! The GETs run concurrently,
//! bounded, and the answer is put together in the call's order, so that the first claim
//! (in that order) that fails fails the call, as it did when they ran one after the other.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimStatus};
use kube::api::{Api, GetParams};

use super::errors::CallError;
use super::pods::{stands_in, PodCache};
use crate::claims::input::ClaimInput;
use crate::mapping::{pod_use, PodUse};
use crate::model::{Allocated, ClaimId};

/// Claims read at once. A kubelet call names the claims of one pod, and a burst is many
/// calls: the client's connection pool and the API server's inflight limit (400 by
/// default) both stay far away.
const CLAIMS_AT_ONCE: usize = 16;
/// Pods of one claim read at once (a shared claim may be reserved for many).
const PODS_AT_ONCE: usize = 8;

/// What a call read.
#[derive(Debug)]
pub struct Fetched {
    /// The claims, in the call's order.
    pub claims: Vec<ClaimInput>,
    /// Reserved pods the cache answered for, not read with a GET.
    pub pods_cached: usize,
}

/// Reads the claims and their pods: this driver's (`driver_name`) results only. Any claim
/// that is missing, replaced or not allocated fails the whole call.
pub async fn fetch(
    client: &kube::Client,
    driver_name: &str,
    cache: &PodCache,
    ids: &[ClaimId],
) -> Result<Fetched, CallError> {
    // The futures made before any is polled: a closure held across the awaits would have
    // to be general over lifetimes, which the service's Send bound cannot prove.
    let reads: Vec<_> = ids
        .iter()
        .map(|id| fetch_one(client, driver_name, cache, id))
        .collect();
    let claims: Vec<(ClaimInput, usize)> = futures::stream::iter(reads)
        .buffered(CLAIMS_AT_ONCE)
        .try_collect()
        .await?;
    let pods_cached = claims.iter().map(|(_, n)| n).sum();
    Ok(Fetched {
        claims: claims.into_iter().map(|(c, _)| c).collect(),
        pods_cached,
    })
}

/// One claim and the pods it is reserved for, and how many of those the cache gave.
async fn fetch_one(
    client: &kube::Client,
    driver_name: &str,
    cache: &PodCache,
    id: &ClaimId,
) -> Result<(ClaimInput, usize), CallError> {
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &id.namespace);
    let claim = claims
        .get_opt(&id.name)
        .await
        .map_err(|source| CallError::Fetch {
            claim: id.to_string(),
            source,
        })?
        .ok_or_else(|| CallError::NotFound {
            claim: id.to_string(),
        })?;
    let found = claim.metadata.uid.clone().unwrap_or_default();
    if found != id.uid {
        return Err(CallError::Replaced {
            claim: id.to_string(),
            found,
            expected: id.uid.clone(),
        });
    }
    let status = claim.status.as_ref();
    let Some(alloc) = status.and_then(|s| s.allocation.as_ref()) else {
        return Err(CallError::NotAllocated {
            claim: id.to_string(),
        });
    };
    let devices = alloc.devices.as_ref();
    let results = devices
        .map(|d| {
            d.results
                .iter()
                .flatten()
                .filter(|r| r.driver == driver_name)
                .map(|r| Allocated {
                    request: r.request.clone(),
                    pool: r.pool.clone(),
                    device: r.device.clone(),
                    share_id: r.share_id.clone(),
                    admin_access: r.admin_access.unwrap_or(false),
                    consumed: r
                        .consumed_capacity
                        .iter()
                        .flatten()
                        .map(|(k, q)| (k.clone(), q.0.clone()))
                        .collect(),
                })
                .collect()
        })
        .unwrap_or_default();
    let configs = devices.and_then(|d| d.config.clone()).unwrap_or_default();
    let (pods, pod_errors, cached) = reserved_pods(client, cache, id, status).await;
    let input = ClaimInput {
        id: id.clone(),
        results,
        configs,
        pods,
        pod_errors,
    };
    Ok((input, cached))
}

/// The pods a claim is reserved for, in its `reservedFor` order, the errors of those that
/// could not be read, and how many the cache gave.
async fn reserved_pods(
    client: &kube::Client,
    cache: &PodCache,
    id: &ClaimId,
    status: Option<&ResourceClaimStatus>,
) -> (Vec<PodUse>, Vec<String>, usize) {
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &id.namespace);
    let reads: Vec<_> = status
        .and_then(|s| s.reserved_for.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|r| r.resource == "pods" && r.api_group.as_deref().is_none_or(str::is_empty))
        .map(|r| {
            let cached = cache.pod_use(&id.namespace, &r.name, &r.uid, &id.name);
            read_pod(&pods_api, &r.name, &r.uid, &id.name, cached)
        })
        .collect();
    let read: Vec<_> = futures::stream::iter(reads)
        .buffered(PODS_AT_ONCE)
        .collect()
        .await;
    let mut pods = Vec::new();
    let mut pod_errors = Vec::new();
    let mut cached = 0;
    for (name, uid, got) in read {
        match got {
            Ok(Read::Cached(u)) => {
                cached += 1;
                pods.push(u)
            }
            Ok(Read::Served(u)) => pods.push(u),
            Ok(Read::Got(Some(p))) if p.metadata.uid.as_deref() == Some(uid) => {
                pods.extend(pod_use(&p, &id.name))
            }
            // Gone or replaced: it will never run a container with this claim.
            Ok(_) => tracing::debug!(pod = name, "reserved pod not found; skipped"),
            Err(e) => pod_errors.push(format!("pod {}/{name}: {e}", id.namespace)),
        }
    }
    (pods, pod_errors, cached)
}

/// A reserved pod: its use of the claim from the cache or from the API server's watch
/// cache, or what a quorum GET found.
enum Read {
    Cached(PodUse),
    Served(PodUse),
    Got(Option<Box<Pod>>),
}

/// One reserved pod, with the name and UID it was reserved under: the cache's answer, or a
/// GET where it had none.
async fn read_pod<'a>(
    api: &Api<Pod>,
    name: &'a str,
    uid: &'a str,
    claim: &str,
    cached: Option<PodUse>,
) -> (&'a str, &'a str, kube::Result<Read>) {
    let got = match cached {
        Some(u) => Ok(Read::Cached(u)),
        None => get_pod(api, name, uid, claim).await,
    };
    (name, uid, got)
}

/// The pod from the API server's watch cache where it stands in for a quorum read (half the
/// cost: no etcd round trip), else from a quorum read. Whatever the first read answers that
/// does not stand in (an error, a miss, another UID) leaves it to the second.
async fn get_pod(api: &Api<Pod>, name: &str, uid: &str, claim: &str) -> kube::Result<Read> {
    match api.get_with(name, &GetParams::any()).await {
        Ok(p) => match stands_in(&p, uid, claim) {
            Some(u) => return Ok(Read::Served(u)),
            None => tracing::debug!(
                pod = name,
                "pod in the watch cache does not stand in; quorum read"
            ),
        },
        Err(e) => tracing::debug!(pod = name, error = %e, "watch-cache read failed; quorum read"),
    }
    api.get_opt(name).await.map(|p| Read::Got(p.map(Box::new)))
}
