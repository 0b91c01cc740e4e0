//! The scheduler extender's HTTP API as kube-scheduler speaks it (k8s.io/kube-scheduler
//! extender/v1): Go structs without JSON tags, so the field names are the Go names, and
//! Go's decoder matches the answer's names without regard to case.

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

/// `ExtenderArgs`: the pod and its candidate nodes, as a node list (`nodeCacheCapable:
/// false`) or as names (`true`).
#[derive(Debug, Deserialize)]
pub struct ExtenderArgs {
    /// The pod being scheduled.
    #[serde(rename = "Pod")]
    pub pod: Option<Pod>,
    /// Candidate nodes, whole.
    #[serde(rename = "Nodes")]
    pub nodes: Option<NodeList>,
    /// Candidate nodes, by name.
    #[serde(rename = "NodeNames")]
    pub node_names: Option<Vec<String>>,
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
