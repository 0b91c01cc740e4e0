//! A placed domain none of whose workload claims is allocated yet moves to another clique
//! when its own no longer has `numNodes` nodes with room (a free IMEX channel and a free GPU,
//! `clique::NodeChannels::has_room`) and another has: otherwise its pods would wait on a
//! clique whose GPUs are taken while another stands idle. Its objects go (`place::take_down`),
//! then its claims that are not allocated, each only as it was read (uid and
//! resourceVersion), so that one the scheduler allocates meanwhile stays; Kubernetes' claim
//! controller makes them again from the new template. If any claim is allocated after all,
//! the domain keeps its placement and its next reconcile writes its objects again.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{DeleteParams, ListParams, Preconditions};
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};

use crate::clique::{self, NodeChannels};
use crate::context::{event, kube_err};
use crate::crd::ComputeDomain;
use crate::objects::{identity, DOMAIN_LABEL};
use crate::place::{take_down, write, Records};
use crate::record::Record;
use crate::slot::{self, Placement};
use crate::term::Term;
use crate::Error;

/// Whether a claim has an allocation.
fn allocated(c: &ResourceClaim) -> bool {
    c.status.as_ref().is_some_and(|s| s.allocation.is_some())
}

/// Where the domain should go instead of `p`, if anywhere: `None` while any of its claims
/// is allocated, while its clique has room for it, or when no other clique has. `taken`
/// (the slots other domains hold) is asked only then: most reconciles end before it.
pub fn better(
    nodes: &BTreeMap<String, NodeChannels>,
    num_nodes: usize,
    p: &Placement,
    claims: &[ResourceClaim],
    taken: impl FnOnce() -> BTreeMap<String, std::collections::BTreeSet<u32>>,
) -> Option<Placement> {
    if claims.iter().any(allocated) || clique::room_in(nodes, &p.clique) >= num_nodes {
        return None;
    }
    slot::place(nodes, num_nodes, (None, None), &taken())
        .ok()
        .filter(|n| n.clique != p.clique)
}

/// Moves domain `cd` (record `r`, placed at `p`) when [`better`] finds a place; returns the
/// placement it has afterwards.
pub(crate) async fn revisit(
    term: &Term,
    records: &mut Records,
    cd: &ComputeDomain,
    nodes: &BTreeMap<String, NodeChannels>,
    claims: &[ResourceClaim],
    p: Placement,
) -> Result<Placement, Error> {
    let (_, ns, uid) = identity(cd)?;
    let num = cd.spec.min_nodes();
    let Some(to) = better(nodes, num, &p, claims, || slot::taken(records, &uid)) else {
        return Ok(p);
    };
    let Some(r) = records.get(&uid).cloned() else {
        return Ok(p);
    };
    take_down(term, &uid, &r, cd).await?;
    // Straight from the API server (the cache may lag).
    let api = Api::<ResourceClaim>::namespaced(term.client.clone(), &ns);
    let listed = api
        .list(&ListParams::default().labels(&format!("{DOMAIN_LABEL}={uid}")))
        .await
        .map_err(kube_err(cd, "listing the domain's claims"))?;
    if listed.items.iter().any(allocated) {
        return Ok(p);
    }
    for c in &listed.items {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: c.uid(),
                resource_version: c.resource_version(),
            }),
            ..DeleteParams::background()
        };
        match api.delete(&c.name_any(), &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            // Changed since it was listed (allocated, most likely): the domain stays.
            Err(kube::Error::Api(e)) if e.code == 409 => return Ok(p),
            Err(e) => return Err(kube_err(cd, "deleting a claim not yet allocated")(e)),
        }
    }
    let have = clique::room_in(nodes, &p.clique);
    let why = format!(
        "moved from clique {} (slot {}) to clique {} (slot {}): {} of its nodes have a free \
         IMEX channel and a free GPU, the domain needs {num}, and none of its claims was \
         allocated ({} made again from the new template)",
        p.clique,
        p.slot,
        to.clique,
        to.slot,
        have,
        listed.items.len()
    );
    let moved = Record {
        placement: Some(to.clone()),
        nodes: Vec::new(),
        ..r
    };
    write(term, records, &uid, moved, cd).await?;
    term.metrics.cliques_changed.inc();
    event(term, cd, EventType::Normal, "CliqueChanged", why).await;
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clique::{channel_slice, node_channels};

    fn claim(allocated: bool) -> ResourceClaim {
        let mut c = ResourceClaim::default();
        if allocated {
            c.status = Some(serde_json::from_value(serde_json::json!({"allocation": {}})).unwrap());
        }
        c
    }

    #[test]
    fn an_unallocated_domain_leaves_a_clique_without_room_for_one_with_room() {
        let slices = crate::devices::records(&[
            channel_slice("a", "u.1", 2),
            channel_slice("b", "u.1", 2),
            channel_slice("c", "u.2", 2),
        ]);
        let at = Placement {
            clique: "u.2".into(),
            slot: 0,
        };
        let taken = BTreeMap::new();
        let free = node_channels(&slices, &Default::default());
        assert_eq!(
            better(&free, 1, &at, &[], || taken.clone()),
            None,
            "u.2 has room"
        );
        // c's channels both taken (by another domain, slot 1 and the other slot).
        let full: std::collections::HashSet<_> = [0, 1]
            .map(|i| ("c".to_string(), format!("imex-channel-{i}")))
            .into();
        let full = node_channels(&slices, &full);
        let to = better(&full, 1, &at, &[claim(false)], || taken.clone());
        assert_eq!(to.map(|p| p.clique), Some("u.1".into()));
        assert_eq!(
            better(&full, 1, &at, &[claim(true)], || taken.clone()),
            None
        );
        assert_eq!(
            better(&full, 3, &at, &[], || taken.clone()),
            None,
            "no clique has 3"
        );
    }
}
