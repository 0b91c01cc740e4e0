//! A domain's pods are bound where the domain is ready (DRA binding conditions). With
//! ComputeDomains on, graft-driver publishes each IMEX channel with the binding condition
//! [`READY_CONDITION`] and the failure condition [`FAILED_CONDITION`]: the scheduler
//! allocates a channel, then holds the pod in its binding cycle until the claim's device
//! status says one of them. Meanwhile the allocation makes the node a member, so the
//! domain's IMEX daemon starts there (`members`, `objects::daemonset`). The controller
//! writes, for each allocated channel still waiting:
//!
//! | the node's daemon (domain status) | since allocation | written |
//! |---|---|---|
//! | Ready | any | Ready=True: the pod is bound, and prepare finds the domain ready |
//! | not Ready | under the timeout | Ready=False, reason `WaitingForDaemon` (once) |
//! | not Ready | past the timeout | Failed=True, reason `NotReadyInTime`: the scheduler undoes the allocation and schedules the pod again |
//!
//! A channel whose conditions are settled (Ready or Failed True) is left alone: once the pod
//! is bound nothing reads them. Only graft's results that carry the binding condition count
//! (a cluster without the feature gate drops them, and prepare waits as before).

use std::time::Duration;

use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::clique::DRIVER;
use crate::crd::{ComputeDomainStatus, Readiness};
use crate::members::allocation_nodes;
use crate::place::MANAGER;
pub use graft_api::compute_domain::{FAILED_CONDITION, READY_CONDITION};

/// What one allocated channel's conditions should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The domain's daemon on the node is Ready: bind.
    Ready(String),
    /// Not yet: the reason the pod waits.
    Waiting(String),
    /// Not in time: undo the allocation.
    Failed(String),
}

impl Verdict {
    /// The conditions it writes: (type, status, reason, message).
    fn conditions(&self) -> Vec<(&'static str, &'static str, &'static str, &str)> {
        match self {
            Verdict::Ready(m) => vec![(READY_CONDITION, "True", "DaemonReady", m)],
            Verdict::Waiting(m) => vec![(READY_CONDITION, "False", "WaitingForDaemon", m)],
            Verdict::Failed(m) => vec![
                (READY_CONDITION, "False", "NotReadyInTime", m),
                (FAILED_CONDITION, "True", "NotReadyInTime", m),
            ],
        }
    }
}

/// One allocated graft device of a claim and the conditions it has now.
#[derive(Debug, Clone)]
struct Channel {
    pool: String,
    device: String,
    /// Set when the channel may be allocated many times (ComputeDomains on, consumable
    /// capacity): part of the device status's key.
    share_id: Option<String>,
    waits: bool,
    conditions: Vec<Condition>,
}

fn channels(claim: &ResourceClaim) -> Vec<Channel> {
    let status = claim.status.as_ref();
    let results = status
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref());
    results
        .into_iter()
        .flatten()
        .filter(|r| r.driver == DRIVER)
        .map(|r| {
            let conditions = status
                .and_then(|s| s.devices.as_ref())
                .into_iter()
                .flatten()
                .find(|d| {
                    d.driver == DRIVER
                        && d.pool == r.pool
                        && d.device == r.device
                        && d.share_id == r.share_id
                })
                .and_then(|d| d.conditions.clone())
                .unwrap_or_default();
            Channel {
                pool: r.pool.clone(),
                device: r.device.clone(),
                share_id: r.share_id.clone(),
                waits: r
                    .binding_conditions
                    .as_ref()
                    .is_some_and(|c| c.iter().any(|c| c == READY_CONDITION)),
                conditions,
            }
        })
        .collect()
}

fn is_true(conditions: &[Condition], kind: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == kind && c.status == "True")
}

/// What `claim`'s waiting channels should say, given the domain's status `st`; `None` when
/// none waits (not allocated, no binding condition, or settled).
pub fn verdict(
    claim: &ResourceClaim,
    st: &ComputeDomainStatus,
    now: Timestamp,
    timeout: Duration,
) -> Option<Verdict> {
    let waiting = channels(claim).into_iter().any(|c| {
        c.waits
            && !is_true(&c.conditions, READY_CONDITION)
            && !is_true(&c.conditions, FAILED_CONDITION)
    });
    if !waiting {
        return None;
    }
    let node = allocation_nodes(claim)?
        .into_iter()
        .next()
        .unwrap_or_default();
    let here = st.nodes.iter().find(|n| n.name == node);
    if here.is_some_and(|n| n.status == Readiness::Ready) {
        return Some(Verdict::Ready(format!(
            "the domain's IMEX daemon on node {node} is Ready"
        )));
    }
    let since = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.allocation_timestamp.as_ref())
        .map(|t| t.0)
        .unwrap_or(now);
    let waited = now.duration_since(since).unsigned_abs();
    let what = match here {
        Some(_) => format!("the domain's IMEX daemon on node {node} is not Ready"),
        None => format!("the domain has no IMEX daemon on node {node} yet"),
    };
    if waited >= timeout {
        Some(Verdict::Failed(format!(
            "{what} {}s after the allocation: the scheduler places the pod again",
            timeout.as_secs()
        )))
    } else {
        Some(Verdict::Waiting(format!(
            "{what}; the pod is bound once it is (for up to {}s)",
            timeout.as_secs()
        )))
    }
}

/// Whether writing `v` would change `claim`'s waiting channels (same types, statuses and
/// reasons: an unchanged wait is not rewritten).
fn changes(claim: &ResourceClaim, v: &Verdict) -> bool {
    let want = v.conditions();
    channels(claim).iter().filter(|c| c.waits).any(|c| {
        want.iter().any(|(t, s, r, _)| {
            !c.conditions
                .iter()
                .any(|have| have.type_ == *t && have.status == *s && have.reason == *r)
        })
    })
}

/// Writes `v` on every waiting channel of `claim` (server-side apply of the controller's own
/// entries of `status.devices`); nothing when it would change nothing.
pub async fn write(
    client: &kube::Client,
    claim: &ResourceClaim,
    v: &Verdict,
) -> Result<(), kube::Error> {
    if !changes(claim, v) {
        return Ok(());
    }
    let now = Time(Timestamp::now());
    let devices: Vec<_> = channels(claim)
        .into_iter()
        .filter(|c| c.waits)
        .map(|c| {
            let conditions: Vec<_> = v
                .conditions()
                .into_iter()
                .map(|(t, s, r, m)| {
                    // An unchanged condition keeps the time it last changed.
                    let since = c
                        .conditions
                        .iter()
                        .find(|h| h.type_ == t && h.status == s)
                        .map(|h| h.last_transition_time.clone())
                        .unwrap_or_else(|| now.clone());
                    json!({"type": t, "status": s, "reason": r, "message": m,
                           "lastTransitionTime": since})
                })
                .collect();
            let mut entry = json!({"driver": DRIVER, "pool": c.pool, "device": c.device,
                                   "conditions": conditions});
            if let Some(id) = &c.share_id {
                entry["shareID"] = json!(id);
            }
            entry
        })
        .collect();
    let ns = claim.namespace().unwrap_or_default();
    let body = json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": claim.name_any(), "namespace": ns},
        "status": {"devices": devices},
    });
    let api: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns);
    api.patch_status(
        &claim.name_any(),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map(drop)
}

#[cfg(test)]
mod tests;
