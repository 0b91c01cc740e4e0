//! One reconcile of a live domain: place it (clique and slot), write its objects, report
//! its status from the daemon pods, and take its label from nodes it left.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};

use crate::controller::{event, key, kube_err, validate, Context};
use crate::crd::{ComputeDomain, ComputeDomainStatus, Readiness};
use crate::metrics::DomainLabels;
use crate::objects::{self, DOMAIN_LABEL};
use crate::slot::{self, Placement, Unplaced};
use crate::{clique, labels, status, Error};

/// The field manager of the controller's server-side applies.
const MANAGER: &str = "graft-compute-domain-controller";

async fn set_status(
    ctx: &Context,
    cd: &ComputeDomain,
    st: &ComputeDomainStatus,
) -> Result<(), Error> {
    if cd.status.as_ref() == Some(st) {
        return Ok(());
    }
    let api: Api<ComputeDomain> =
        Api::namespaced(ctx.client.clone(), &cd.namespace().unwrap_or_default());
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

/// The domain's clique and slot: kept when its status has them, else chosen and written
/// to its status before anything else, under the context's lock, so that the next domain's
/// choice sees it. The kept values are read from the API, not from the (maybe older)
/// object this reconcile got. `true` with a placement chosen now.
async fn place(
    ctx: &Context,
    cd: &ComputeDomain,
    nodes: &std::collections::BTreeMap<String, clique::NodeChannels>,
) -> Result<Result<(Placement, bool), Unplaced>, Error> {
    let (_, _, uid) = objects::identity(cd)?;
    let _held = ctx.placing.lock().await;
    let api: Api<ComputeDomain> = match &ctx.scope {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let mut lp = ListParams::default();
    if let Some(sel) = &ctx.selector {
        lp = lp.labels(sel);
    }
    let domains = api
        .list(&lp)
        .await
        .map_err(kube_err(cd, "listing ComputeDomains"))?
        .items;
    let now = domains
        .iter()
        .find(|d| d.metadata.uid.as_deref() == Some(uid.as_str()))
        .and_then(|d| d.status.clone())
        .or_else(|| cd.status.clone())
        .unwrap_or_default();
    let current = (now.clique.as_deref(), now.slot);
    let p = match slot::place(
        nodes,
        cd.spec.num_nodes as usize,
        current,
        &slot::taken(&domains, &uid),
    ) {
        Ok(p) => p,
        Err(e) => return Ok(Err(e)),
    };
    let new = now.clique.as_deref() != Some(p.clique.as_str()) || now.slot != Some(p.slot);
    if new {
        let st = ComputeDomainStatus {
            clique: Some(p.clique.clone()),
            slot: Some(p.slot),
            ..now
        };
        let fresh = ComputeDomain {
            status: None,
            ..cd.clone()
        };
        set_status(ctx, &fresh, &st).await?;
    }
    Ok(Ok((p, new)))
}

pub(crate) async fn apply(cd: Arc<ComputeDomain>, ctx: &Context) -> Result<Action, Error> {
    let (name, ns, uid) = objects::identity(&cd)?;
    let labels = DomainLabels {
        namespace: ns.clone(),
        name: name.clone(),
    };
    let old_message = cd.status.as_ref().and_then(|s| s.message.clone());
    if let Err(why) = validate(&cd) {
        let why = why.to_string();
        let st = ComputeDomainStatus {
            message: Some(why.clone()),
            ..Default::default()
        };
        if old_message.as_ref() != Some(&why) {
            event(ctx, &cd, EventType::Warning, "Invalid", why).await;
        }
        set_status(ctx, &cd, &st).await?;
        return Ok(Action::await_change());
    }
    let c = &ctx.client;
    let slices = Api::<ResourceSlice>::all(c.clone())
        .list(&ListParams::default())
        .await
        .map_err(kube_err(&cd, "listing ResourceSlices"))?;
    let claims = Api::<ResourceClaim>::all(c.clone())
        .list(&ListParams::default())
        .await
        .map_err(kube_err(&cd, "listing ResourceClaims"))?;
    let nodes = clique::node_channels(&slices.items, &clique::allocated(&claims.items));
    let (placed, new) = match place(ctx, &cd, &nodes).await? {
        Ok(p) => p,
        Err(why) => {
            ctx.metrics.placement_failures.inc();
            let reason = match why {
                Unplaced::NoClique(_) => "NoClique",
                Unplaced::NoSlot { .. } => "NoSlot",
            };
            let kept = match &why {
                Unplaced::NoSlot { clique, .. } => cd
                    .status
                    .as_ref()
                    .and_then(|s| s.clique.clone())
                    .filter(|c| c == clique),
                Unplaced::NoClique(_) => None,
            };
            let why = why.to_string();
            if old_message.as_ref() != Some(&why) {
                event(ctx, &cd, EventType::Warning, reason, why.clone()).await;
            }
            let st = ComputeDomainStatus {
                message: Some(why),
                clique: kept,
                ..Default::default()
            };
            set_status(ctx, &cd, &st).await?;
            return Ok(Action::requeue(Duration::from_secs(15)));
        }
    };
    if !objects::valid_clique(&placed.clique) {
        return Err(Error::Invalid {
            domain: key(&cd),
            why: format!("clique id {:?} is malformed", placed.clique),
        });
    }
    if new {
        let (server, cmd) = slot::ports(placed.slot).unwrap_or_default();
        let note = format!(
            "placed in clique {} at slot {} (IMEX ports {server}, {cmd})",
            placed.clique, placed.slot
        );
        event(ctx, &cd, EventType::Normal, "CliqueChosen", note).await;
    }

    // The workload template: refuse to take over one the domain does not own.
    let rct_api: Api<ResourceClaimTemplate> = Api::namespaced(c.clone(), &ns);
    let rct = objects::workload_template(&cd, &ctx.cfg, &placed)?;
    let rct_name = rct.name_any();
    if let Some(old) = rct_api
        .get_opt(&rct_name)
        .await
        .map_err(kube_err(&cd, "reading the workload template"))?
    {
        if old.labels().get(DOMAIN_LABEL) != Some(&uid) {
            let why =
                format!("ResourceClaimTemplate {ns}/{rct_name} exists and is not this domain's");
            event(
                ctx,
                &cd,
                EventType::Warning,
                "TemplateConflict",
                why.clone(),
            )
            .await;
            return Err(Error::Invalid {
                domain: key(&cd),
                why,
            });
        }
    } else {
        apply_obj(&rct_api, &rct, &cd, "workload ResourceClaimTemplate").await?;
    }
    let daemon_ns = &ctx.cfg.namespace;
    let drct_api: Api<ResourceClaimTemplate> = Api::namespaced(c.clone(), daemon_ns);
    let drct = objects::daemon_template(&cd, &ctx.cfg, &placed)?;
    if drct_api
        .get_opt(&drct.name_any())
        .await
        .map_err(kube_err(&cd, "reading the daemon template"))?
        .is_none()
    {
        apply_obj(&drct_api, &drct, &cd, "daemon ResourceClaimTemplate").await?;
    }
    let ds_api: Api<DaemonSet> = Api::namespaced(c.clone(), daemon_ns);
    let ds = objects::daemonset(&cd, &ctx.cfg, &placed)?;
    apply_obj(&ds_api, &ds, &cd, "DaemonSet").await?;

    let pods = Api::<Pod>::namespaced(c.clone(), daemon_ns)
        .list(&ListParams::default().labels(&format!("{DOMAIN_LABEL}={uid}")))
        .await
        .map_err(kube_err(&cd, "listing the daemon pods"))?;
    let st = status::aggregate(&pods.items, &nodes, cd.spec.num_nodes as usize, &placed);
    report(ctx, &cd, &st, &labels).await;
    set_status(ctx, &cd, &st).await?;

    for node in labels::prune(ctx, &cd).await? {
        let note = format!("node {node} holds no allocated claim of the domain: label removed");
        event(ctx, &cd, EventType::Normal, "NodeLeft", note).await;
    }
    Ok(Action::requeue(Duration::from_secs(60)))
}

/// Metrics and Events for a new status: the domain's readiness changing, and each node
/// that stopped being Ready (a lost node, a crashed daemon) by name.
async fn report(ctx: &Context, cd: &ComputeDomain, st: &ComputeDomainStatus, l: &DomainLabels) {
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
    for node in status::lost(cd.status.as_ref(), st) {
        let note = format!("node {node}: its IMEX daemon is no longer Ready");
        event(ctx, cd, EventType::Warning, "NodeNotReady", note).await;
    }
    let was = cd.status.as_ref().map(|s| s.status).unwrap_or_default();
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
