//! A domain's members: the nodes its allocated workload claims name. Only a claim in the
//! domain's own namespace labelled with its uid counts (its template makes them so), and
//! only the scheduler's allocation names the node; a node's own labels and the daemon pods
//! running on it count for nothing, so that a node cannot make itself a peer of a domain
//! that has no workload there.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::json;

use graft_api::compute_domain::{NodeStatus, DOMAIN_LABEL};

/// The nodes an allocated claim holds devices on: `None` while it is not allocated, and
/// empty when its allocation names no node by name. graft's devices are node-local: the
/// scheduler writes the node as a field selector on metadata.name.
pub fn allocation_nodes(c: &ResourceClaim) -> Option<Vec<String>> {
    let alloc = c.status.as_ref()?.allocation.as_ref()?;
    Some(
        alloc
            .node_selector
            .iter()
            .flat_map(|s| s.node_selector_terms.iter())
            .flat_map(|t| t.match_fields.iter().flatten())
            .filter(|r| r.key == "metadata.name" && r.operator == "In")
            .flat_map(|r| r.values.iter().flatten().cloned())
            .collect(),
    )
}

/// The domain's workload claims: those of namespace `ns` labelled with its `uid`.
pub fn domain_claims(claims: &[Arc<ResourceClaim>], ns: &str, uid: &str) -> Vec<ResourceClaim> {
    claims
        .iter()
        .filter(|c| c.metadata.namespace.as_deref() == Some(ns))
        .filter(|c| {
            c.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(DOMAIN_LABEL))
                .map(String::as_str)
                == Some(uid)
        })
        .map(|c| ResourceClaim::clone(c))
        .collect()
}

/// The members: every node an allocated workload claim names.
pub fn members(claims: &[ResourceClaim]) -> BTreeSet<String> {
    claims
        .iter()
        .filter_map(allocation_nodes)
        .flatten()
        .collect()
}

/// Gives each of `nodes` its place in the IMEX node list (`graft-imex-daemon`'s names): the
/// place it had in `previous` (the record), else the lowest free one, in name order. A
/// member keeps its place while it stays, so that replacing one member remaps one name and
/// restarts no daemon.
pub fn places(previous: &[NodeStatus], nodes: &mut [NodeStatus]) {
    let mut taken = BTreeSet::new();
    for n in nodes.iter_mut() {
        n.index = previous
            .iter()
            .find(|p| p.name == n.name)
            .and_then(|p| p.index)
            .filter(|i| taken.insert(*i));
    }
    let mut next = 0;
    for n in nodes.iter_mut().filter(|n| n.index.is_none()) {
        while taken.contains(&next) {
            next += 1;
        }
        taken.insert(next);
        n.index = Some(next);
    }
}

/// A node affinity that admits exactly the `members` by name: one term each (a field
/// requirement on metadata.name takes exactly one value), or with none a term no node
/// meets (the API wants at least one term).
pub fn member_affinity(members: &BTreeSet<String>) -> serde_json::Value {
    let by_name =
        |op: &str, n: &str| json!({"key": "metadata.name", "operator": op, "values": [n]});
    let terms: Vec<_> = if members.is_empty() {
        vec![json!({"matchFields": [by_name("In", "none"), by_name("NotIn", "none")]})]
    } else {
        members
            .iter()
            .map(|n| json!({"matchFields": [by_name("In", n)]}))
            .collect()
    };
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": terms}}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(ns: &str, uid: Option<&str>, node: Option<&str>) -> Arc<ResourceClaim> {
        let mut c = serde_json::json!({
            "metadata": {"name": "c", "namespace": ns},
            "spec": {},
        });
        if let Some(u) = uid {
            c["metadata"]["labels"] = serde_json::json!({DOMAIN_LABEL: u});
        }
        if let Some(n) = node {
            c["status"] = serde_json::json!({"allocation": {
                "devices": {"results": []},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [n]}]}]},
            }});
        }
        Arc::new(serde_json::from_value(c).unwrap())
    }

    #[test]
    fn members_are_the_nodes_of_the_domain_s_allocated_claims_only() {
        let all = [
            claim("t", Some("u1"), Some("a")),
            claim("t", Some("u1"), None),
            // Another domain's claim, a claim of no domain, and one labelled for the
            // domain in another namespace (whoever made it there): none of them count.
            claim("t", Some("u2"), Some("b")),
            claim("t", None, Some("c")),
            claim("evil", Some("u1"), Some("d")),
        ];
        let mine = domain_claims(&all, "t", "u1");
        assert_eq!(mine.len(), 2);
        assert_eq!(members(&mine), BTreeSet::from(["a".to_string()]));
        assert!(members(&[]).is_empty());
    }

    #[test]
    fn daemons_are_placed_on_the_members_by_name_or_nowhere() {
        let two = BTreeSet::from(["a".to_string(), "b".to_string()]);
        let a = member_affinity(&two);
        let terms = &a["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        assert_eq!(
            terms,
            &json!([
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]},
            ])
        );
        // No member: one term that no name meets (In and NotIn the same name).
        let none = member_affinity(&BTreeSet::new());
        let t = &none["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        assert_eq!(t.as_array().map(Vec::len), Some(1));
        let f = &t[0]["matchFields"];
        assert_eq!(
            (&f[0]["operator"], &f[1]["operator"]),
            (&json!("In"), &json!("NotIn"))
        );
        assert_eq!(f[0]["values"], f[1]["values"]);
    }

    #[test]
    fn an_allocation_that_names_no_node_adds_none() {
        let mut odd = ResourceClaim::clone(&claim("t", Some("u1"), Some("a")));
        if let Some(a) = odd.status.as_mut().and_then(|s| s.allocation.as_mut()) {
            a.node_selector = None;
        }
        assert_eq!(allocation_nodes(&odd), Some(Vec::new()));
        assert!(members(&[odd]).is_empty());
    }

    #[test]
    fn a_member_keeps_its_place_and_a_newcomer_takes_the_lowest_free() {
        let n = |name: &str, index: Option<u32>| NodeStatus {
            name: name.into(),
            ip_address: String::new(),
            clique_id: String::new(),
            status: Default::default(),
            index,
        };
        let places_of = |nodes: &[NodeStatus]| -> Vec<(String, Option<u32>)> {
            nodes.iter().map(|n| (n.name.clone(), n.index)).collect()
        };
        let mut first = vec![n("a", None), n("b", None)];
        places(&[], &mut first);
        assert_eq!(
            places_of(&first),
            [("a".into(), Some(0)), ("b".into(), Some(1))]
        );
        // a lost, c joins: b keeps 1, c takes a's 0.
        let mut next = vec![n("b", None), n("c", None)];
        places(&first, &mut next);
        assert_eq!(
            places_of(&next),
            [("b".into(), Some(1)), ("c".into(), Some(0))]
        );
        // A record claiming one place twice: the first keeps it.
        let odd = [n("b", Some(1)), n("c", Some(1))];
        let mut again = vec![n("b", None), n("c", None), n("d", None)];
        places(&odd, &mut again);
        assert_eq!(
            places_of(&again),
            [
                ("b".into(), Some(1)),
                ("c".into(), Some(0)),
                ("d".into(), Some(2))
            ]
        );
    }
}
