//! A domain's clique and slot, kept in its record (`record`), never read from its status.
//! A domain with a placement keeps it; one without gets the lowest free slot of the
//! smallest clique with room (`slot`), within its namespace's cap (`policy`); when the clique
//! it needs has no free slot, an empty domain's slot there is taken for it (`release`); one
//! none of whose claims is allocated moves when its clique has lost room (`revisit`, which
//! `apply` calls for a domain placed before).
//! A domain an older controller placed (no record yet) keeps the placement its DaemonSet in
//! graft's namespace shows.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};

use crate::cleanup::ignore_404;
use crate::clique::{self, NodeChannels};
use crate::context::{event_on, kube_err};
use crate::crd::ComputeDomain;
use crate::objects::{daemon_name, identity, DOMAIN_LABEL};
use crate::policy::idle_since;
use crate::record::Record;
use crate::slot::{self, Placement, Unplaced};
use crate::term::Term;
use crate::Error;

/// The field manager of the controller's server-side applies.
pub(crate) const MANAGER: &str = "graft-compute-domain-controller";

/// The records of the domains, by uid (the term's, held by the caller).
pub(crate) type Records = BTreeMap<String, Record>;

/// The placement a DaemonSet of an older controller shows: its clique and server port.
pub fn adopt(ds: &DaemonSet) -> Option<Placement> {
    let c = ds
        .spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .first()?;
    let env = |k: &str| {
        c.env
            .iter()
            .flatten()
            .find(|e| e.name == k)
            .and_then(|e| e.value.clone())
    };
    let clique = env("COMPUTE_DOMAIN_CLIQUE")?;
    let port: u32 = env("GRAFT_IMEX_SERVER_PORT")?.parse().ok()?;
    let step = port.checked_sub(slot::SERVER_PORT_BASE.into())?;
    (step % 10 == 0 && slot::ports(step / 10).is_some()).then_some(Placement {
        clique,
        slot: step / 10,
    })
}

/// Writes a domain's record and keeps it in `records`.
pub(crate) async fn write(
    term: &Term,
    records: &mut Records,
    uid: &str,
    r: Record,
    cd: &ComputeDomain,
) -> Result<(), Error> {
    if records.get(uid) == Some(&r) {
        return Ok(());
    }
    let api: Api<ConfigMap> = Api::namespaced(term.client.clone(), &term.cfg.namespace);
    let cm = r.to_config_map(uid, &term.cfg.namespace);
    api.patch(
        &daemon_name(uid),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&cm),
    )
    .await
    .map_err(kube_err(cd, "writing the domain's record"))?;
    records.insert(uid.to_string(), r);
    Ok(())
}

/// The domain's record: the one kept, else a new one (with the placement its DaemonSet
/// shows, for a domain placed before records were kept).
async fn current(term: &Term, records: &Records, cd: &ComputeDomain) -> Result<Record, Error> {
    let (name, ns, uid) = identity(cd)?;
    if let Some(r) = records.get(&uid) {
        return Ok(r.clone());
    }
    let ds = Api::<DaemonSet>::namespaced(term.client.clone(), &term.cfg.namespace)
        .get_opt(&daemon_name(&uid))
        .await
        .map_err(kube_err(cd, "reading the DaemonSet"))?;
    Ok(Record {
        namespace: ns,
        name,
        template: cd.spec.channel.resource_claim_template.name.clone(),
        placement: ds.as_ref().and_then(adopt),
        ..Default::default()
    })
}

/// The domain's placement (`true`: chosen now), or why it has none. `has_claims`: whether
/// the domain has any workload claim (a newly placed domain without one starts idle).
pub(crate) async fn place(
    term: &Term,
    records: &mut Records,
    cd: &ComputeDomain,
    nodes: &BTreeMap<String, NodeChannels>,
    has_claims: bool,
) -> Result<Result<(Placement, bool), Unplaced>, Error> {
    let (_, ns, uid) = identity(cd)?;
    let mut r = current(term, records, cd).await?;
    if let Some(p) = r.placement.clone() {
        write(term, records, &uid, r, cd).await?;
        return Ok(Ok((p, false)));
    }
    if let Err(held) = term.policy.room_in(records, &ns, &uid) {
        return Ok(Err(Unplaced::NamespaceFull {
            namespace: ns,
            held,
        }));
    }
    // An elastic domain goes to the clique with the most room, where it can grow.
    let num = if cd.spec.elastic() {
        clique::most_room(nodes).max(1)
    } else {
        cd.spec.min_nodes()
    };
    let mut chosen = slot::place(nodes, num, (None, None), &slot::taken(records, &uid));
    if let Err(Unplaced::NoSlot { clique, .. }) = &chosen {
        let now = Timestamp::now();
        if let Some(idle) = term.policy.idle_holder(records, clique, now, &uid) {
            if release(term, records, &idle, cd).await? {
                chosen = slot::place(nodes, num, (None, None), &slot::taken(records, &uid));
            }
        }
    }
    let p = match chosen {
        Ok(p) => p,
        Err(e) => return Ok(Err(e)),
    };
    r.placement = Some(p.clone());
    r.released = None;
    r.idle_since = idle_since(None, has_claims, Timestamp::now());
    write(term, records, &uid, r, cd).await?;
    Ok(Ok((p, true)))
}

/// Deletes the objects of domain `uid` (record `r`) that pin its placement, for `on`: its
/// workload template first (so that no new claim can pin the slot), then its daemons'
/// DaemonSet and claim template. Its next reconcile writes them again for its placement.
pub(crate) async fn take_down(
    term: &Term,
    uid: &str,
    r: &Record,
    on: &ComputeDomain,
) -> Result<(), Error> {
    let c = &term.client;
    let failed = |what: &str| kube_err(on, &format!("{what} of {}/{}", r.namespace, r.name));
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(c.clone(), &r.namespace);
    if let Some(t) = templates
        .get_opt(&r.template)
        .await
        .map_err(failed("reading the workload template"))?
    {
        if t.labels().get(DOMAIN_LABEL).map(String::as_str) == Some(uid) {
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: t.uid(),
                    resource_version: None,
                }),
                ..DeleteParams::background()
            };
            ignore_404(templates.delete(&r.template, &dp).await)
                .await
                .map_err(failed("deleting the workload template"))?;
        }
    }
    let name = daemon_name(uid);
    let dp = DeleteParams::background();
    let ds: Api<DaemonSet> = Api::namespaced(c.clone(), &term.cfg.namespace);
    ignore_404(ds.delete(&name, &dp).await)
        .await
        .map_err(failed("deleting the DaemonSet"))?;
    let drct: Api<ResourceClaimTemplate> = Api::namespaced(c.clone(), &term.cfg.namespace);
    ignore_404(drct.delete(&name, &dp).await)
        .await
        .map_err(failed("deleting the daemon template"))?;
    Ok(())
}

/// Takes the slot of the empty domain `idle` for `waiting`: its workload template goes
/// first (so that no new claim can pin the slot), then its daemons; if a claim of it
/// exists after all (made before its template went), it keeps its slot (`false`) and its
/// next reconcile writes its objects again.
async fn release(
    term: &Term,
    records: &mut Records,
    idle: &str,
    waiting: &ComputeDomain,
) -> Result<bool, Error> {
    let Some(r) = records.get(idle).cloned() else {
        return Ok(false);
    };
    let Some(p) = r.placement.clone() else {
        return Ok(false);
    };
    let c = &term.client;
    let failed = |what: &str| kube_err(waiting, &format!("{what} of {}/{}", r.namespace, r.name));
    take_down(term, idle, &r, waiting).await?;
    // Straight from the API server (the cache may lag): at most one, by the domain label.
    let claims = Api::<ResourceClaim>::namespaced(c.clone(), &r.namespace)
        .list_metadata(
            &ListParams::default()
                .labels(&format!("{DOMAIN_LABEL}={idle}"))
                .limit(1),
        )
        .await
        .map_err(failed("listing the claims"))?;
    if !claims.items.is_empty() {
        return Ok(false);
    }
    let (wname, wns, _) = identity(waiting)?;
    let grace = term.policy.idle_grace.as_secs();
    let why = format!(
        "its slot {} in clique {} went to {wns}/{wname}, which waited for one, after the \
         domain had had no workload claim for {grace}s; it gets a slot again once one is free",
        p.slot, p.clique
    );
    let on = ObjectReference {
        api_version: Some("resource.graft.dev/v1alpha1".into()),
        kind: Some(crate::crd::KIND.into()),
        name: Some(r.name.clone()),
        namespace: Some(r.namespace.clone()),
        uid: Some(idle.to_string()),
        ..Default::default()
    };
    let released = Record {
        placement: None,
        idle_since: None,
        released: Some(why.clone()),
        nodes: Vec::new(),
        ..r
    };
    write(term, records, idle, released, waiting).await?;
    term.metrics.slots_released.inc();
    event_on(term, &on, EventType::Warning, "SlotReleased", why).await;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_daemonset_shows_its_placement() {
        let ds: DaemonSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "imex-u"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "imex",
                "env": [{"name": "COMPUTE_DOMAIN_CLIQUE", "value": "u.1"},
                        {"name": "GRAFT_IMEX_SERVER_PORT", "value": "50030"}]}]}}}
        }))
        .unwrap();
        assert_eq!(
            adopt(&ds),
            Some(Placement {
                clique: "u.1".into(),
                slot: 3
            })
        );
        let mut odd = ds.clone();
        if let Some(c) = odd
            .spec
            .as_mut()
            .and_then(|s| s.template.spec.as_mut())
            .map(|p| &mut p.containers[0])
        {
            c.env.as_mut().unwrap()[1].value = Some("50031".into());
        }
        assert_eq!(adopt(&odd), None);
        assert_eq!(adopt(&DaemonSet::default()), None);
    }
}
