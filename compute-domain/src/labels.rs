//! The domain's node labels: graft-driver adds `resource.graft.dev/computeDomain.<uid>` to a
//! node when it prepares a workload claim of the domain there (only ever adds it); the
//! controller removes it from every node that holds no allocated workload claim of the
//! domain, so that the domain's IMEX daemon leaves the node with the last workload.
//!
//! The test is "a claim is allocated there" (its allocation's node selector names the
//! node), never "prepared there": the scheduler allocates a claim before the kubelet
//! prepares it, so a node about to be labelled already holds the allocation.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};

use crate::controller::{kube_err, Context};
use crate::crd::ComputeDomain;
use crate::objects::{node_label, DOMAIN_LABEL};
use crate::Error;

/// The nodes the allocated claims hold devices on, or `None` when an allocation names its
/// nodes in a way this cannot read (then no label is removed: keeping a daemon too long is
/// harmless, taking it from a workload is not).
pub fn allocated_nodes(claims: &[ResourceClaim]) -> Option<BTreeSet<String>> {
    let mut nodes = BTreeSet::new();
    for c in claims {
        let Some(alloc) = c.status.as_ref().and_then(|s| s.allocation.as_ref()) else {
            continue;
        };
        // graft's devices are node-local: the scheduler writes the node as a field
        // selector on metadata.name.
        let names: Vec<String> = alloc
            .node_selector
            .iter()
            .flat_map(|s| s.node_selector_terms.iter())
            .flat_map(|t| t.match_fields.iter().flatten())
            .filter(|r| r.key == "metadata.name" && r.operator == "In")
            .flat_map(|r| r.values.iter().flatten().cloned())
            .collect();
        if names.is_empty() {
            return None;
        }
        nodes.extend(names);
    }
    Some(nodes)
}

/// Which of the `labelled` nodes lose the label: those no allocated claim holds.
pub fn stale(labelled: &[String], claims: &[ResourceClaim]) -> Vec<String> {
    let Some(held) = allocated_nodes(claims) else {
        return Vec::new();
    };
    labelled
        .iter()
        .filter(|n| !held.contains(*n))
        .cloned()
        .collect()
}

async fn set_label(nodes: &Api<Node>, node: &str, key: &str, on: bool) -> kube::Result<()> {
    let value = if on {
        serde_json::json!("true")
    } else {
        serde_json::Value::Null
    };
    let patch = serde_json::json!({"metadata": {"labels": {key: value}}});
    match nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes the domain's label from the nodes that hold none of its allocated workload
/// claims; returns the nodes it was removed from.
pub(crate) async fn prune(ctx: &Context, cd: &ComputeDomain) -> Result<Vec<String>, Error> {
    let (_, ns, uid) = crate::objects::identity(cd)?;
    let key = node_label(&uid);
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    // Nodes first, claims second: a node labelled when listed was labelled by a prepare,
    // whose claim was allocated before, so the later claim list shows it (or it is gone).
    let labelled: Vec<String> = nodes
        .list(&ListParams::default().labels(&key))
        .await
        .map_err(kube_err(cd, "listing the domain's nodes"))?
        .items
        .iter()
        .map(|n| n.name_any())
        .collect();
    if labelled.is_empty() {
        return Ok(Vec::new());
    }
    let claims: Api<ResourceClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let selector = ListParams::default().labels(&format!("{DOMAIN_LABEL}={uid}"));
    let list = claims
        .list(&selector)
        .await
        .map_err(kube_err(cd, "listing the domain's claims"))?;
    let gone = stale(&labelled, &list.items);
    for n in &gone {
        set_label(&nodes, n, &key, false).await.map_err(kube_err(
            cd,
            &format!("removing the domain's label from node {n}"),
        ))?;
    }
    if gone.is_empty() {
        return Ok(gone);
    }
    // A claim allocated to one of them after the list may have been prepared before the
    // removal (its label then was a no-op): give those nodes their label back.
    let again = claims
        .list(&selector)
        .await
        .map_err(kube_err(cd, "listing the domain's claims"))?;
    let held = allocated_nodes(&again.items).unwrap_or_default();
    let mut removed = Vec::new();
    for n in gone {
        if held.contains(&n) {
            set_label(&nodes, &n, &key, true).await.map_err(kube_err(
                cd,
                &format!("restoring the domain's label on node {n}"),
            ))?;
        } else {
            removed.push(n);
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(node: Option<&str>) -> ResourceClaim {
        let mut c = serde_json::json!({
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {},
        });
        if let Some(n) = node {
            c["status"] = serde_json::json!({"allocation": {
                "devices": {"results": []},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [n]}]}]},
            }});
        }
        serde_json::from_value(c).unwrap()
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn nodes_without_an_allocated_claim_lose_the_label() {
        let labelled = names(&["a", "b", "c"]);
        // b's claim is allocated (its prepare may not have run yet): b keeps the label;
        // the pending claim holds no node: a and c lose it.
        let claims = [claim(Some("b")), claim(None)];
        assert_eq!(stale(&labelled, &claims), names(&["a", "c"]));
        assert_eq!(stale(&labelled, &[]), labelled);
        assert!(stale(&[], &claims).is_empty());
    }

    #[test]
    fn an_allocation_that_names_no_node_removes_nothing() {
        let mut odd = claim(Some("b"));
        if let Some(a) = odd.status.as_mut().and_then(|s| s.allocation.as_mut()) {
            a.node_selector = None;
        }
        assert_eq!(allocated_nodes(&[odd.clone()]), None);
        assert!(stale(&names(&["a"]), &[claim(Some("b")), odd]).is_empty());
    }
}
