//! A domain's status from its IMEX daemon pods: a node is Ready when its daemon pod is, and
//! the domain when `numNodes` nodes are and every node is in the chosen clique (NVIDIA's
//! driver reports Ready across cliques; graft does not).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use crate::clique::NodeChannels;
use crate::crd::{ComputeDomainStatus, NodeStatus, Readiness};

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The status of a domain of `num_nodes` nodes in `clique` whose daemons are `pods`.
pub fn aggregate(
    pods: &[Pod],
    nodes: &BTreeMap<String, NodeChannels>,
    num_nodes: usize,
    clique: &str,
) -> ComputeDomainStatus {
    let mut by_node: BTreeMap<String, NodeStatus> = BTreeMap::new();
    for p in pods {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        let entry = NodeStatus {
            name: node.clone(),
            ip_address: p
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.clone())
                .unwrap_or_default(),
            clique_id: nodes
                .get(&node)
                .map(|n| n.clique.clone())
                .unwrap_or_default(),
            status: if pod_ready(p) {
                Readiness::Ready
            } else {
                Readiness::NotReady
            },
        };
        // Two pods on one node (a rollout): the node is Ready if either is.
        match by_node.get(&node) {
            Some(old) if old.status == Readiness::Ready => {}
            _ => {
                by_node.insert(node, entry);
            }
        }
    }
    let list: Vec<NodeStatus> = by_node.into_values().collect();
    let ready = list.iter().filter(|n| n.status == Readiness::Ready).count();
    let strays: Vec<&str> = list
        .iter()
        .filter(|n| n.clique_id != clique)
        .map(|n| n.name.as_str())
        .collect();
    let (status, message) = if !strays.is_empty() {
        (
            Readiness::NotReady,
            Some(format!(
                "nodes outside clique {clique}: {}",
                strays.join(", ")
            )),
        )
    } else if ready >= num_nodes {
        (Readiness::Ready, None)
    } else {
        (
            Readiness::NotReady,
            Some(format!("{ready} of {num_nodes} nodes ready")),
        )
    };
    ComputeDomainStatus {
        status,
        clique: Some(clique.to_string()),
        nodes: list,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(node: &str, ready: bool) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("d-{node}")},
            "spec": {"nodeName": node, "containers": []},
            "status": {"podIP": "10.0.0.9", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .unwrap()
    }

    fn cliques(pairs: &[(&str, &str)]) -> BTreeMap<String, NodeChannels> {
        pairs
            .iter()
            .map(|(n, c)| {
                (
                    n.to_string(),
                    NodeChannels {
                        clique: c.to_string(),
                        free: 1,
                        total: 1,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn ready_when_enough_nodes_are() {
        let c = cliques(&[("a", "u.1"), ("b", "u.1")]);
        let s = aggregate(&[pod("a", true), pod("b", false)], &c, 2, "u.1");
        assert_eq!(s.status, Readiness::NotReady);
        assert_eq!(s.message.as_deref(), Some("1 of 2 nodes ready"));
        assert_eq!(s.nodes[0].ip_address, "10.0.0.9");
        let s = aggregate(&[pod("a", true), pod("b", true)], &c, 2, "u.1");
        assert_eq!(s.status, Readiness::Ready);
        assert_eq!(s.nodes.len(), 2);
        assert_eq!(s.nodes[1].clique_id, "u.1");
    }

    #[test]
    fn a_node_of_another_clique_keeps_it_not_ready() {
        let c = cliques(&[("a", "u.1"), ("b", "u.1"), ("c", "u.2")]);
        let pods = [pod("a", true), pod("b", true), pod("c", true)];
        let s = aggregate(&pods, &c, 2, "u.1");
        assert_eq!(s.status, Readiness::NotReady);
        assert!(s.message.unwrap().contains("c"));
    }

    #[test]
    fn unscheduled_pods_are_not_nodes() {
        let mut p = pod("a", true);
        p.spec.as_mut().unwrap().node_name = None;
        let s = aggregate(&[p], &cliques(&[]), 1, "u.1");
        assert!(s.nodes.is_empty());
        assert_eq!(s.status, Readiness::NotReady);
    }
}
