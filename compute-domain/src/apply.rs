//! One reconcile of a live domain, from the caches: its members (`members`), its placement
//! (`place`), its objects (the DaemonSet on the members), its status and record from the
//! daemon pods on its members, and its label taken from nodes that are no members.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use crate::context::{event, key, kube_err, validate, Context};
use crate::crd::{ComputeDomain, ComputeDomainStatus, Readiness};
use crate::metrics::DomainLabels;
use crate::objects::{self, DOMAIN_LABEL};
use crate::place::{self, MANAGER};
use crate::slot::{self, Placement, Unplaced};
use crate::term::{Term, Written};
use crate::{binding, clique, labels, members, policy, revisit, status, Error};

/// The status this term last wrote for the domain `uid` (the cached domains keep none:
/// their namespace may write it, and as large as it likes).
fn reported(term: &Term, uid: &str) -> Option<ComputeDomainStatus> {
    term.reported.lock().ok()?.get(uid).cloned()
}

async fn set_status(
    term: &Term,
    cd: &ComputeDomain,
    st: &ComputeDomainStatus,
) -> Result<(), Error> {
    let (_, _, uid) = objects::identity(cd)?;
    if reported(term, &uid).as_ref() == Some(st) {
        return Ok(());
    }
    let api: Api<ComputeDomain> =
        Api::namespaced(term.client.clone(), &cd.namespace().unwrap_or_default());
    // A merge patch leaves out what is absent: a field that became empty is sent as null.
    let mut body = serde_json::to_value(st).map_err(|e| Error::Build {
        what: "status",
        source: e,
    })?;
    if let Some(o) = body.as_object_mut() {
        for k in ["clique", "slot", "message"] {
            o.entry(k).or_insert(serde_json::Value::Null);
        }
    }
    let patch = serde_json::json!({ "status": body });
    api.patch_status(
        &cd.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(kube_err(cd, "updating status"))?;
    if let Ok(mut r) = term.reported.lock() {
        r.insert(uid, st.clone());
    }
    Ok(())
}

async fn apply_obj<K>(api: &Api<K>, obj: &K, cd: &ComputeDomain, what: &str) -> Result<(), Error>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .map_err(kube_err(cd, &format!("applying the {what} {name}")))?;
    Ok(())
}

pub(crate) async fn apply(cd: Arc<ComputeDomain>, term: &Term) -> Result<Action, Error> {
    let (name, ns, uid) = objects::identity(&cd)?;
    let labels = DomainLabels {
        namespace: ns.clone(),
        name: name.clone(),
    };
    let prior = reported(term, &uid);
    let old_message = prior.as_ref().and_then(|s| s.message.clone());
    if let Err(why) = validate(&cd) {
        let why = why.to_string();
        let st = ComputeDomainStatus {
            message: Some(why.clone()),
            ..Default::default()
        };
        if old_message.as_ref() != Some(&why) {
            event(term, &cd, EventType::Warning, "Invalid", why).await;
        }
        set_status(term, &cd, &st).await?;
        return Ok(Action::await_change());
    }
    // From the caches: every graft channel and who holds it, the domain's claims.
    let slices = term.caches.slices.state();
    let all_claims = term.caches.claims.state();
    let nodes = clique::node_channels(
        slices.iter().map(|s| &**s),
        &clique::allocated(all_claims.iter().map(|c| &**c)),
    );
    let claims = members::domain_claims(&all_claims, &ns, &uid);
    drop(all_claims);
    let members = members::members(&claims);

    let mut records = term.records.lock().await;
    let placed = match place::place(term, &mut records, &cd, &nodes, !claims.is_empty()).await? {
        Ok((p, true)) => {
            let (server, cmd) = slot::ports(p.slot).unwrap_or_default();
            let note = format!(
                "placed in clique {} at slot {} (IMEX ports {server}, {cmd})",
                p.clique, p.slot
            );
            event(term, &cd, EventType::Normal, "CliqueChosen", note).await;
            p
        }
        // Placed before: it may move while none of its claims is allocated.
        Ok((p, false)) => revisit::revisit(term, &mut records, &cd, &nodes, &claims, p).await?,
        Err(why) => {
            term.metrics.placement_failures.inc();
            let reason = match why {
                Unplaced::NoClique(_) => "NoClique",
                Unplaced::NoSlot { .. } => "NoSlot",
                Unplaced::NamespaceFull { .. } => "NamespaceFull",
            };
            let released = records.get(&uid).and_then(|r| r.released.clone());
            drop(records);
            let why = match released {
                Some(r) => format!("lost its slot: {r}. {why}"),
                None => why.to_string(),
            };
            if old_message.as_ref() != Some(&why) {
                event(term, &cd, EventType::Warning, reason, why.clone()).await;
            }
            let st = ComputeDomainStatus {
                message: Some(why),
                ..Default::default()
            };
            set_status(term, &cd, &st).await?;
            return Ok(Action::requeue(Duration::from_secs(15)));
        }
    };
    if !objects::valid_clique(&placed.clique) {
        return Err(Error::Invalid {
            domain: key(&cd),
            why: format!("clique id {:?} is malformed", placed.clique),
        });
    }
    write_objects(term, &cd, &placed, &members).await?;

    let pods: Vec<Pod> = term
        .caches
        .pods
        .state()
        .iter()
        .filter(|p| p.labels().get(DOMAIN_LABEL) == Some(&uid))
        .map(|p| Pod::clone(p))
        .collect();
    let mut st = status::aggregate(&pods, &nodes, cd.spec.min_nodes(), &placed, &members);
    let previous = records
        .get(&uid)
        .map(|r| r.nodes.as_slice())
        .unwrap_or_default();
    members::places(previous, &mut st.nodes);
    let strangers = status::strangers(&pods, &members);
    term.metrics
        .non_member_daemons
        .get_or_create(&labels)
        .set(strangers.len() as i64);
    if !strangers.is_empty() {
        tracing::warn!(domain = %key(&cd), nodes = ?strangers,
                       "daemon pods on nodes that are no members: left out");
    }
    if let Some(mut r) = records.get(&uid).cloned() {
        r.nodes = st.nodes.clone();
        r.idle_since = policy::idle_since(r.idle_since, !claims.is_empty(), Timestamp::now());
        place::write(term, &mut records, &uid, r, &cd).await?;
    }
    drop(records);
    report(term, &cd, prior.as_ref(), &st, &labels).await;
    set_status(term, &cd, &st).await?;

    for node in labels::prune(term, &cd, &claims).await? {
        let note = format!("node {node} holds no allocated claim of the domain: label removed");
        event(term, &cd, EventType::Normal, "NodeLeft", note).await;
    }
    // Pods waiting to be bound: looked at again soon, so that a timeout is noticed.
    if settle_bindings(term, &cd, &claims, &st).await? {
        return Ok(Action::requeue(Duration::from_secs(10)));
    }
    // Without a member yet, the domain may still move (`revisit`): looked at again sooner,
    // as slices and other domains' claims change without waking it.
    if members.is_empty() {
        return Ok(Action::requeue(Duration::from_secs(15)));
    }
    Ok(Action::requeue(Duration::from_secs(60)))
}

/// Writes the binding conditions of the domain's allocated channels (`binding`); true while
/// any pod still waits.
async fn settle_bindings(
    term: &Term,
    cd: &ComputeDomain,
    claims: &[ResourceClaim],
    st: &ComputeDomainStatus,
) -> Result<bool, Error> {
    let mut waiting = false;
    for claim in claims {
        let Some(v) = binding::verdict(claim, st, Timestamp::now(), term.binding_timeout) else {
            continue;
        };
        if let binding::Verdict::Failed(why) = &v {
            let note = format!("claim {}: {why}", claim.name_any());
            event(term, cd, EventType::Warning, "BindingFailed", note).await;
        }
        waiting |= matches!(v, binding::Verdict::Waiting(_));
        binding::write(&term.client, claim, &v)
            .await
            .map_err(kube_err(
                cd,
                &format!("writing claim {}'s binding conditions", claim.name_any()),
            ))?;
    }
    Ok(waiting)
}

/// The workload template (refusing to take over one the domain does not own), and in
/// graft's namespace the daemon template and the DaemonSet on the domain's members.
async fn write_objects(
    term: &Term,
    cd: &ComputeDomain,
    placed: &Placement,
    members: &BTreeSet<String>,
) -> Result<(), Error> {
    let (_, ns, uid) = objects::identity(cd)?;
    let c = &term.client;
    let rct_api: Api<ResourceClaimTemplate> = Api::namespaced(c.clone(), &ns);
    let rct = objects::workload_template(cd, &term.cfg, placed)?;
    let rct_name = rct.name_any();
    if let Some(old) = rct_api
        .get_opt(&rct_name)
        .await
        .map_err(kube_err(cd, "reading the workload template"))?
    {
        if old.labels().get(DOMAIN_LABEL) != Some(&uid) {
            let why =
                format!("ResourceClaimTemplate {ns}/{rct_name} exists and is not this domain's");
            event(
                term,
                cd,
                EventType::Warning,
                "TemplateConflict",
                why.clone(),
            )
            .await;
            return Err(Error::Invalid {
                domain: key(cd),
                why,
            });
        }
    } else {
        apply_obj(&rct_api, &rct, cd, "workload ResourceClaimTemplate").await?;
    }
    let daemon_ns = &term.cfg.namespace;
    let drct_api: Api<ResourceClaimTemplate> = Api::namespaced(c.clone(), daemon_ns);
    let drct = objects::daemon_template(cd, &term.cfg, placed)?;
    if drct_api
        .get_opt(&drct.name_any())
        .await
        .map_err(kube_err(cd, "reading the daemon template"))?
        .is_none()
    {
        apply_obj(&drct_api, &drct, cd, "daemon ResourceClaimTemplate").await?;
    }
    let ds = objects::daemonset(cd, &term.cfg, placed, members)?;
    write_daemonset(term, cd, &uid, &ds).await
}

/// The domain's DaemonSet, applied unless it is what was last written and the cached one is
/// still that one, unchanged since (each reconcile wrote it before: 1,675 writes for four
/// domains in one fleet benchmark run). One deleted or edited by someone else is written
/// again.
async fn write_daemonset(
    term: &Term,
    cd: &ComputeDomain,
    uid: &str,
    ds: &DaemonSet,
) -> Result<(), Error> {
    let bytes = serde_json::to_vec(ds).map_err(|source| Error::Build {
        what: "DaemonSet",
        source,
    })?;
    let mut h = std::hash::DefaultHasher::new();
    bytes.hash(&mut h);
    let digest = h.finish();
    let name = ds.name_any();
    let at = ObjectRef::new(&name).within(&term.cfg.namespace);
    let now = term.caches.daemonsets.get(&at).map(|d| Written {
        digest,
        uid: d.metadata.uid.clone(),
        generation: d.metadata.generation,
    });
    let last = term.written.lock().ok().and_then(|w| w.get(uid).cloned());
    if now.is_some() && now == last {
        return Ok(());
    }
    let api: Api<DaemonSet> = Api::namespaced(term.client.clone(), &term.cfg.namespace);
    let out = api
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(ds),
        )
        .await
        .map_err(kube_err(cd, &format!("applying the DaemonSet {name}")))?;
    let w = Written {
        digest,
        uid: out.metadata.uid,
        generation: out.metadata.generation,
    };
    if let Ok(mut m) = term.written.lock() {
        m.insert(uid.to_string(), w);
    }
    Ok(())
}

/// Metrics and Events for a new status: the domain's readiness changing, and each node
/// that stopped being Ready (a lost node, a crashed daemon) by name.
async fn report(
    ctx: &Context,
    cd: &ComputeDomain,
    prior: Option<&ComputeDomainStatus>,
    st: &ComputeDomainStatus,
    l: &DomainLabels,
) {
    let ready_nodes = st
        .nodes
        .iter()
        .filter(|n| n.status == Readiness::Ready)
        .count();
    ctx.metrics
        .ready_nodes
        .get_or_create(l)
        .set(ready_nodes as i64);
    ctx.metrics
        .ready
        .get_or_create(l)
        .set((st.status == Readiness::Ready) as i64);
    for node in status::lost(prior, st) {
        let note = format!("node {node}: its IMEX daemon is no longer Ready");
        event(ctx, cd, EventType::Warning, "NodeNotReady", note).await;
    }
    let was = prior.map(|s| s.status).unwrap_or_default();
    if was != st.status {
        let (t, reason) = match st.status {
            Readiness::Ready => (EventType::Normal, "Ready"),
            Readiness::NotReady => (EventType::Warning, "NotReady"),
        };
        let clique = st.clique.as_deref().unwrap_or_default();
        let note = st
            .message
            .clone()
            .unwrap_or_else(|| format!("{ready_nodes} nodes ready in clique {clique}"));
        event(ctx, cd, t, reason, note).await;
    }
}
