//! The domain's node labels: graft-driver adds `resource.graft.dev/computeDomain.<uid>` to a
//! node when it prepares a workload claim of the domain there (only ever adds it). The
//! label draws nothing (the daemons are placed by the members' names, `members`); the
//! controller still removes it from every node that is no member, and on deletion from
//! every node, so that labels of gone domains do not pile up on nodes.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};

use crate::context::kube_err;
use crate::crd::ComputeDomain;
use crate::members::allocation_nodes;
use crate::objects::{node_label, DOMAIN_LABEL};
use crate::term::Term;
use crate::Error;

/// The nodes the allocated claims hold devices on, or `None` when an allocation names its
/// nodes in a way this cannot read (then no label is removed).
pub fn allocated_nodes(claims: &[ResourceClaim]) -> Option<BTreeSet<String>> {
    let mut nodes = BTreeSet::new();
    for c in claims {
        match allocation_nodes(c) {
            None => {}
            Some(names) if names.is_empty() => return None,
            Some(names) => nodes.extend(names),
        }
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

/// Removes the domain's label from the nodes (of the cache) that hold none of its allocated
/// workload claims (`claims` from the cache, confirmed from the API server before a label
/// goes); returns the nodes it was removed from. (A node labelled again by a
/// prepare racing with this is harmless: the label draws nothing.)
pub(crate) async fn prune(
    ctx: &Term,
    cd: &ComputeDomain,
    claims: &[ResourceClaim],
) -> Result<Vec<String>, Error> {
    let (_, ns, uid) = crate::objects::identity(cd)?;
    let key = node_label(&uid);
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let labelled: Vec<String> = ctx
        .caches
        .nodes
        .state()
        .iter()
        .filter(|n| n.labels().contains_key(&key))
        .map(|n| n.name_any())
        .collect();
    if stale(&labelled, claims).is_empty() {
        return Ok(Vec::new());
    }
    // The cache of claims and the watch that woke this reconcile may disagree for a moment:
    // before a label goes, the domain's claims are read from the API server (its own only,
    // in small pages, trimmed as the cache keeps them).
    let api: Api<ResourceClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let mut lp = ListParams::default()
        .labels(&format!("{DOMAIN_LABEL}={uid}"))
        .limit(crate::cache::PAGE);
    let mut fresh = Vec::new();
    loop {
        let page = api
            .list(&lp)
            .await
            .map_err(kube_err(cd, "listing the domain's claims"))?;
        for mut c in page.items {
            crate::cache::trim_claim(&mut c);
            fresh.push(c);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => lp = lp.continue_token(&next),
            None => break,
        }
    }
    let gone = stale(&labelled, &fresh);
    let patch = serde_json::json!({"metadata": {"labels": {key.as_str(): null}}});
    for n in &gone {
        match nodes
            .patch(n, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(kube_err(
                    cd,
                    &format!("removing the domain's label from node {n}"),
                )(e))
            }
        }
    }
    Ok(gone)
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
