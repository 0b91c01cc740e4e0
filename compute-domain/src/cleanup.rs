//! Deleting a domain: its DaemonSet and claim templates, its label on every node, and last
//! its record (its slot is held until its daemons are gone), before the finalizer lets the
//! domain go.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use crate::context::kube_err;
use crate::crd::ComputeDomain;
use crate::metrics::DomainLabels;
use crate::objects::{self, DOMAIN_LABEL};
use crate::term::Term;
use crate::Error;

pub(crate) async fn ignore_404<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

pub(crate) async fn cleanup(cd: Arc<ComputeDomain>, ctx: &Term) -> Result<Action, Error> {
    let (name, ns, uid) = objects::identity(&cd)?;
    let mut records = ctx.records.lock().await;
    let c = &ctx.client;
    let dp = DeleteParams::background();
    let daemon = objects::daemon_name(&uid);
    let ds: Api<DaemonSet> = Api::namespaced(c.clone(), &ctx.cfg.namespace);
    ignore_404(ds.delete(&daemon, &dp).await)
        .await
        .map_err(kube_err(&cd, "deleting the DaemonSet"))?;
    let drct: Api<ResourceClaimTemplate> = Api::namespaced(c.clone(), &ctx.cfg.namespace);
    ignore_404(drct.delete(&daemon, &dp).await)
        .await
        .map_err(kube_err(&cd, "deleting the daemon template"))?;
    // The workload template only if it is the domain's (a name may have been taken).
    let rct: Api<ResourceClaimTemplate> = Api::namespaced(c.clone(), &ns);
    let tname = &cd.spec.channel.resource_claim_template.name;
    // A domain refused as written never had one (and its name may not even be one).
    if crate::context::validate(&cd).is_ok() {
        if let Some(t) = rct
            .get_opt(tname)
            .await
            .map_err(kube_err(&cd, "reading the workload template"))?
        {
            if t.labels().get(DOMAIN_LABEL) == Some(&uid) {
                ignore_404(rct.delete(tname, &dp).await)
                    .await
                    .map_err(kube_err(&cd, "deleting the workload template"))?;
            }
        }
    }
    let key = objects::node_label(&uid);
    let nodes: Api<Node> = Api::all(c.clone());
    let labelled = nodes
        .list(&ListParams::default().labels(&key))
        .await
        .map_err(kube_err(&cd, "listing labelled nodes"))?;
    for n in labelled.items {
        let patch = serde_json::json!({"metadata": {"labels": {key.as_str(): null}}});
        ignore_404(
            nodes
                .patch(
                    &n.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await,
        )
        .await
        .map_err(kube_err(
            &cd,
            &format!("removing the domain's label from node {}", n.name_any()),
        ))?;
    }
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), &ctx.cfg.namespace);
    ignore_404(cms.delete(&daemon, &dp).await)
        .await
        .map_err(kube_err(&cd, "deleting the domain's record"))?;
    records.remove(&uid);
    if let Ok(mut w) = ctx.written.lock() {
        w.remove(&uid);
    }
    if let Ok(mut r) = ctx.reported.lock() {
        r.remove(&uid);
    }
    ctx.metrics.forget(&DomainLabels {
        namespace: ns,
        name,
    });
    Ok(Action::await_change())
}
