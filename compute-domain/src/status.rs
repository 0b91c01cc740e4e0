//! A domain's status from its IMEX daemon pods on its members (`members`): a node is Ready
//! when its daemon pod is, and the domain when `numNodes` nodes are and every node is in
//! the chosen clique (NVIDIA's driver reports Ready across cliques; graft does not). A
//! daemon pod on a node that is no member is not listed, whatever put it there.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;

use crate::clique::NodeChannels;
use crate::crd::{ComputeDomainStatus, NodeStatus, Readiness};
use crate::slot::Placement;

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn live_node(p: &Pod) -> Option<&str> {
    if p.metadata.deletion_timestamp.is_some() {
        return None;
    }
    p.spec.as_ref()?.node_name.as_deref()
}

/// The nodes with a daemon pod of the domain that are no members of it.
pub fn strangers(pods: &[Pod], members: &BTreeSet<String>) -> BTreeSet<String> {
    pods.iter()
        .filter_map(live_node)
        .filter(|n| !members.contains(*n))
        .map(str::to_string)
        .collect()
}

/// The status of a domain of `num_nodes` nodes placed at `place` whose daemons are `pods`
/// and whose members are `members` (pods elsewhere are left out). A node whose daemon pod is not Ready (a crashed daemon, or a lost node: the node
/// lifecycle controller marks its pods not Ready) is listed NotReady and named in the
/// message; the domain is Ready only while every member is (a lost member breaks the IMEX
/// domain whatever the count).
pub fn aggregate(
    pods: &[Pod],
    nodes: &BTreeMap<String, NodeChannels>,
    num_nodes: usize,
    place: &Placement,
    members: &BTreeSet<String>,
) -> ComputeDomainStatus {
    let clique = place.clique.as_str();
    let mut by_node: BTreeMap<String, NodeStatus> = BTreeMap::new();
    for p in pods {
        let Some(node) = live_node(p).filter(|n| members.contains(*n)) else {
            continue;
        };
        let node = node.to_string();
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
            index: None,
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
    } else if ready >= num_nodes && ready == list.len() {
        (Readiness::Ready, None)
    } else {
        let not_ready: Vec<&str> = list
            .iter()
            .filter(|n| n.status != Readiness::Ready)
            .map(|n| n.name.as_str())
            .collect();
        let mut m = format!("{ready} of {num_nodes} nodes ready");
        if !not_ready.is_empty() {
            m.push_str(&format!("; not ready: {}", not_ready.join(", ")));
        }
        (Readiness::NotReady, Some(m))
    };
    ComputeDomainStatus {
        status,
        clique: Some(clique.to_string()),
        slot: Some(place.slot),
        nodes: list,
        message,
    }
}

/// The nodes that were Ready in `old` and are not in `new` (not Ready, or gone): each
/// gets an Event naming it.
pub fn lost(old: Option<&ComputeDomainStatus>, new: &ComputeDomainStatus) -> Vec<String> {
    let Some(old) = old else { return Vec::new() };
    old.nodes
        .iter()
        .filter(|o| o.status == Readiness::Ready)
        .filter(|o| {
            !new.nodes
                .iter()
                .any(|n| n.name == o.name && n.status == Readiness::Ready)
        })
        .map(|o| o.name.clone())
        .collect()
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
                        ..Default::default()
                    },
                )
            })
            .collect()
    }

    fn all(n: &[&str]) -> BTreeSet<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    fn at(clique: &str) -> Placement {
        Placement {
            clique: clique.into(),
            slot: 1,
        }
    }

    #[test]
    fn ready_when_enough_nodes_are() {
        let c = cliques(&[("a", "u.1"), ("b", "u.1")]);
        let s = aggregate(
            &[pod("a", true), pod("b", false)],
            &c,
            2,
            &at("u.1"),
            &all(&["a", "b", "c"]),
        );
        assert_eq!(s.status, Readiness::NotReady);
        assert_eq!(
            s.message.as_deref(),
            Some("1 of 2 nodes ready; not ready: b")
        );
        assert_eq!(s.nodes[0].ip_address, "10.0.0.9");
        let s = aggregate(
            &[pod("a", true), pod("b", true)],
            &c,
            2,
            &at("u.1"),
            &all(&["a", "b", "c"]),
        );
        assert_eq!(s.status, Readiness::Ready);
        assert_eq!(s.nodes.len(), 2);
        assert_eq!(s.nodes[1].clique_id, "u.1");
        assert_eq!((s.clique.as_deref(), s.slot), (Some("u.1"), Some(1)));
    }

    #[test]
    fn a_lost_node_turns_the_domain_not_ready_and_is_named() {
        let c = cliques(&[("a", "u.1"), ("b", "u.1"), ("c", "u.1")]);
        let before = aggregate(
            &[pod("a", true), pod("b", true)],
            &c,
            2,
            &at("u.1"),
            &all(&["a", "b", "c"]),
        );
        assert_eq!(before.status, Readiness::Ready);
        // b's kubelet stopped: the node lifecycle controller marks its pods not Ready.
        let after = aggregate(
            &[pod("a", true), pod("b", false)],
            &c,
            2,
            &at("u.1"),
            &all(&["a", "b", "c"]),
        );
        assert_eq!(after.status, Readiness::NotReady);
        assert_eq!(after.nodes[1].status, Readiness::NotReady);
        assert!(after.message.as_deref().unwrap().contains("not ready: b"));
        assert_eq!(lost(Some(&before), &after), ["b"]);
        // Gone altogether (its pod deleted) counts as lost too; a recovered node does not.
        let gone = aggregate(&[pod("a", true)], &c, 2, &at("u.1"), &all(&["a", "b", "c"]));
        assert_eq!(lost(Some(&before), &gone), ["b"]);
        assert!(lost(Some(&after), &before).is_empty());
        assert!(lost(None, &after).is_empty());
        // More members than numNodes: still not Ready while one of them is not.
        let three = [pod("a", true), pod("b", true), pod("c", false)];
        let s = aggregate(&three, &c, 2, &at("u.1"), &all(&["a", "b", "c"]));
        assert_eq!(s.status, Readiness::NotReady);
    }

    #[test]
    fn a_node_of_another_clique_keeps_it_not_ready() {
        let c = cliques(&[("a", "u.1"), ("b", "u.1"), ("c", "u.2")]);
        let pods = [pod("a", true), pod("b", true), pod("c", true)];
        let s = aggregate(&pods, &c, 2, &at("u.1"), &all(&["a", "b", "c"]));
        assert_eq!(s.status, Readiness::NotReady);
        assert!(s.message.unwrap().contains("c"));
    }

    #[test]
    fn daemon_pods_on_nodes_that_are_no_members_are_left_out() {
        let c = cliques(&[("a", "u.1"), ("b", "u.1"), ("x", "u.1")]);
        let pods = [pod("a", true), pod("b", true), pod("x", true)];
        let s = aggregate(&pods, &c, 2, &at("u.1"), &all(&["a", "b"]));
        assert_eq!(s.status, Readiness::Ready);
        let names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(strangers(&pods, &all(&["a", "b"])), all(&["x"]));
        // A member without a daemon yet is not Ready.
        let s = aggregate(&pods[..1], &c, 2, &at("u.1"), &all(&["a", "b"]));
        assert_eq!(s.status, Readiness::NotReady);
    }

    #[test]
    fn a_stranger_flapping_its_daemon_never_restarts_imex() {
        use crate::daemon::{members, plan, Plan};
        let c = cliques(&[("a", "u.1"), ("b", "u.1"), ("x", "u.1")]);
        let with_ip = |node: &str, ip: &str| {
            let mut p = pod(node, true);
            p.status.as_mut().unwrap().pod_ip = Some(ip.into());
            p
        };
        let (a, b, x) = (
            with_ip("a", "10.0.0.1"),
            with_ip("b", "10.0.0.2"),
            with_ip("x", "10.0.0.9"),
        );
        let m = all(&["a", "b"]);
        let own = "10.0.0.1".parse().unwrap();
        let (mut running, mut starts, mut remaps) = (None::<crate::daemon::Running>, 0, 0);
        for round in 0..6 {
            let pods = if round % 2 == 1 {
                vec![a.clone(), b.clone(), x.clone()]
            } else {
                vec![a.clone(), b.clone()]
            };
            let st = aggregate(&pods, &c, 2, &at("u.1"), &m);
            match plan(running.as_ref(), &members(&st.nodes, "u.1"), own, 2) {
                Plan::Run(l) => {
                    starts += 1;
                    running = Some(l);
                }
                Plan::Remap(_) => remaps += 1,
                _ => {}
            }
        }
        assert_eq!((starts, remaps), (1, 0));
    }

    #[test]
    fn unscheduled_pods_are_not_nodes() {
        let mut p = pod("a", true);
        p.spec.as_mut().unwrap().node_name = None;
        let s = aggregate(&[p], &cliques(&[]), 1, &at("u.1"), &all(&["a", "b", "c"]));
        assert!(s.nodes.is_empty());
        assert_eq!(s.status, Readiness::NotReady);
    }
}
