//! graft-scheduler-extender's HTTP API as kube-scheduler speaks it (k8s.io/kube-scheduler
//! extender/v1): Go structs without JSON tags, so the field names are the Go names, and
//! Go's decoder matches the answer's names without regard to case.
//!
//! The pod is read for the few fields scoring and Events use (its name, namespace, uid and
//! claims): the rest of it, however large, is skipped without being kept, so a request
//! costs about its own size in memory.

use k8s_openapi::api::core::v1::{
    Pod, PodResourceClaim, PodResourceClaimStatus, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer, Serialize};

/// `ExtenderArgs`: the pod and its candidate nodes, as a node list (`nodeCacheCapable:
/// false`) or as names (`true`).
#[derive(Debug, Deserialize)]
pub struct ExtenderArgs {
    /// The pod being scheduled (only its name, namespace, uid and claims).
    #[serde(rename = "Pod", default, deserialize_with = "slim_pod")]
    pub pod: Option<Pod>,
    /// Candidate nodes, whole.
    #[serde(rename = "Nodes")]
    pub nodes: Option<NodeList>,
    /// Candidate nodes, by name.
    #[serde(rename = "NodeNames")]
    pub node_names: Option<Vec<String>>,
}

/// The parts of a pod the extender reads; serde skips every other field unkept.
#[derive(Deserialize)]
struct SlimPod {
    #[serde(default)]
    metadata: SlimMeta,
    #[serde(default)]
    spec: Option<SlimSpec>,
    #[serde(default)]
    status: Option<SlimStatus>,
}

#[derive(Default, Deserialize)]
struct SlimMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimSpec {
    resource_claims: Option<Vec<PodResourceClaim>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimStatus {
    resource_claim_statuses: Option<Vec<PodResourceClaimStatus>>,
}

fn slim_pod<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Pod>, D::Error> {
    let Some(p) = Option::<SlimPod>::deserialize(d)? else {
        return Ok(None);
    };
    Ok(Some(Pod {
        metadata: ObjectMeta {
            name: p.metadata.name,
            namespace: p.metadata.namespace,
            uid: p.metadata.uid,
            ..ObjectMeta::default()
        },
        spec: p.spec.map(|s| PodSpec {
            resource_claims: s.resource_claims,
            ..PodSpec::default()
        }),
        status: p.status.map(|s| PodStatus {
            resource_claim_statuses: s.resource_claim_statuses,
            ..PodStatus::default()
        }),
    }))
}

/// A `v1.NodeList`, read for the names only.
#[derive(Debug, Deserialize)]
pub struct NodeList {
    /// The nodes.
    #[serde(default)]
    pub items: Vec<NodeItem>,
}

/// A node, read for its name only.
#[derive(Debug, Deserialize)]
pub struct NodeItem {
    /// Its metadata.
    #[serde(default)]
    pub metadata: NodeMeta,
}

/// A node's name.
#[derive(Debug, Default, Deserialize)]
pub struct NodeMeta {
    /// The name.
    pub name: Option<String>,
}

impl ExtenderArgs {
    /// The candidate nodes' names, whichever form they came in.
    pub fn candidates(&self) -> Vec<String> {
        if let Some(n) = &self.node_names {
            return n.clone();
        }
        self.nodes
            .iter()
            .flat_map(|l| l.items.iter())
            .filter_map(|i| i.metadata.name.clone())
            .collect()
    }
}

/// `HostPriority`: one node's score.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPriority {
    /// The node.
    #[serde(rename = "Host")]
    pub host: String,
    /// Its score, 0 to 10.
    #[serde(rename = "Score")]
    pub score: i64,
}
