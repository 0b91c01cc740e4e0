//! The `prioritize` verb: a score per candidate node for the pod's GPU demand.

use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceClaim;

use crate::demand::{self, Demand};
use crate::score::{self, Mode};
use crate::state;
use graft_api::extender::{ExtenderArgs, HostPriority};

/// What the extender knows of the cluster: each node's GPUs and the claims.
pub trait View: Send + Sync {
    /// Every watch has listed once.
    fn ready(&self) -> bool;
    /// The GPUs of each of `names`, in order (none for a node without graft GPUs): only
    /// the candidates are read, never the whole cluster.
    fn nodes(&self, names: &[String]) -> Vec<state::NodeGpus>;
    /// One claim.
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<ResourceClaim>>;
}

/// How the extender scores.
#[derive(Debug, Clone)]
pub struct Config {
    /// graft's driver name (`graft.dev`).
    pub driver: String,
    /// DeviceClasses that give whole GPUs.
    pub classes: Vec<String>,
    /// Pack or spread.
    pub mode: Mode,
}

/// The answer: every candidate scored, and whether the pod asked for GPUs at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scored {
    /// One entry per candidate, in the order given.
    pub hosts: Vec<HostPriority>,
    /// The pod's demand.
    pub demand: Demand,
}

/// Scores `args`' candidates. A pod without GPU demand gets 0 everywhere: the extender
/// leaves it to the scheduler's other scores.
pub fn prioritize(view: &dyn View, config: &Config, args: &ExtenderArgs) -> Scored {
    let candidates = args.candidates();
    let demand = match &args.pod {
        // Most pods name no claim: answered without a look at the view.
        Some(pod) if !names_claims(pod) => Demand::default(),
        Some(pod) => {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            let found: Vec<Arc<ResourceClaim>> = demand::claim_names(pod)
                .iter()
                .filter_map(|n| view.claim(ns, n))
                .collect();
            let island = format!("{}/{}", config.driver, state::ISLAND);
            demand::of_pod(
                pod,
                |n| {
                    found
                        .iter()
                        .find(|c| c.metadata.name.as_deref() == Some(n))
                        .map(|c| c.as_ref())
                },
                &config.classes,
                &island,
            )
        }
        None => Demand::default(),
    };
    if demand.gpus == 0 {
        let hosts = candidates
            .into_iter()
            .map(|host| HostPriority { host, score: 0 })
            .collect();
        return Scored { hosts, demand };
    }
    let mut nodes = view.nodes(&candidates).into_iter();
    let hosts = candidates
        .into_iter()
        .map(|host| {
            let node = nodes.next().unwrap_or_default();
            let score = score::score(&node, &demand, config.mode);
            HostPriority { host, score }
        })
        .collect();
    Scored { hosts, demand }
}

/// Whether the pod names any ResourceClaim at all.
fn names_claims(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .is_some_and(|c| !c.is_empty())
}

#[cfg(test)]
mod tests;
