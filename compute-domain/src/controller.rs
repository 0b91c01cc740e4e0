//! The reconcile loop: kube-runtime's Controller over ComputeDomains, woken also by the
//! domains' daemon pods; a finalizer so that deletion cleans up (see the crate's docs).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{finalizer, Event as Finalize};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, Controller};
use kube::{Api, Client, Resource, ResourceExt};

use crate::crd::{ComputeDomain, ComputeDomainStatus, Readiness};
use crate::metrics::{DomainLabels, Metrics, ResultLabels};
use crate::objects::{self, DaemonConfig, DOMAIN_LABEL, NAMESPACE_ANNOTATION, NAME_ANNOTATION};
use crate::{clique, status, Error};

/// The finalizer that holds a domain until its objects are gone.
pub const FINALIZER: &str = "resource.graft.dev/compute-domain";
/// The field manager of the controller's server-side applies.
const MANAGER: &str = "graft-compute-domain-controller";

/// What every reconcile shares.
pub struct Context {
    pub(crate) client: Client,
    pub(crate) cfg: DaemonConfig,
    recorder: Recorder,
    pub(crate) metrics: Metrics,
    scope: Option<String>,
}

impl Context {
    /// A context for the controller `reporter`.
    pub fn new(client: Client, cfg: DaemonConfig, metrics: Metrics, reporter: Reporter) -> Self {
        let recorder = Recorder::new(client.clone(), reporter);
        Context {
            client,
            cfg,
            recorder,
            metrics,
            scope: None,
        }
    }

    /// Watches the domains of `namespace` only (default: every namespace).
    pub fn only_namespace(mut self, namespace: &str) -> Self {
        self.scope = Some(namespace.to_string());
        self
    }
}

pub(crate) fn key(cd: &ComputeDomain) -> String {
    format!("{}/{}", cd.namespace().unwrap_or_default(), cd.name_any())
}

pub(crate) fn kube_err(cd: &ComputeDomain, action: &str) -> impl FnOnce(kube::Error) -> Error {
    let domain = key(cd);
    let action = action.to_string();
    move |source| Error::Kube {
        domain,
        action,
        source,
    }
}

async fn event(ctx: &Context, cd: &ComputeDomain, type_: EventType, reason: &str, note: String) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &cd.object_ref(&())).await {
        tracing::warn!(domain = %key(cd), error = %e, "publishing an Event");
    }
}

/// What is wrong with a domain as written, beyond what the CRD's schema refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// The workload template's name is not an object name.
    #[error("channel.resourceClaimTemplate.name {0:?} is not a valid object name")]
    TemplateName(String),
    /// No nodes asked for.
    #[error("numNodes must be at least 1")]
    NoNodes,
}

/// Checks a domain as written, beyond what the CRD's schema refuses.
pub fn validate(cd: &ComputeDomain) -> Result<(), Invalid> {
    let t = &cd.spec.channel.resource_claim_template.name;
    let dns = !t.is_empty()
        && t.len() <= 253
        && t.split('.').all(|l| {
            !l.is_empty()
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    if !dns {
        return Err(Invalid::TemplateName(t.clone()));
    }
    if cd.spec.num_nodes == 0 {
        return Err(Invalid::NoNodes);
    }
    Ok(())
}

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
    let patch = serde_json::json!({"status": st});
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

async fn apply(cd: Arc<ComputeDomain>, ctx: &Context) -> Result<Action, Error> {
    let (name, ns, uid) = objects::identity(&cd)?;
    let labels = DomainLabels {
        namespace: ns.clone(),
        name: name.clone(),
    };
    if let Err(why) = validate(&cd) {
        let why = why.to_string();
        let st = ComputeDomainStatus {
            message: Some(why.clone()),
            ..Default::default()
        };
        if cd.status.as_ref().and_then(|s| s.message.as_ref()) != Some(&why) {
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
    let current = cd.status.as_ref().and_then(|s| s.clique.as_deref());
    let chosen = match clique::choose(&nodes, cd.spec.num_nodes as usize, current) {
        Ok(c) => c,
        Err(why) => {
            ctx.metrics.placement_failures.inc();
            let why = why.to_string();
            if cd.status.as_ref().and_then(|s| s.message.as_ref()) != Some(&why) {
                event(ctx, &cd, EventType::Warning, "NoClique", why.clone()).await;
            }
            let st = ComputeDomainStatus {
                message: Some(why),
                ..Default::default()
            };
            set_status(ctx, &cd, &st).await?;
            return Ok(Action::requeue(Duration::from_secs(15)));
        }
    };
    if !objects::valid_clique(&chosen) {
        return Err(Error::Invalid {
            domain: key(&cd),
            why: format!("clique id {chosen:?} is malformed"),
        });
    }
    if current.is_none() {
        event(
            ctx,
            &cd,
            EventType::Normal,
            "CliqueChosen",
            format!("placed in clique {chosen}"),
        )
        .await;
    }

    // The workload template: refuse to take over one the domain does not own.
    let rct_api: Api<ResourceClaimTemplate> = Api::namespaced(c.clone(), &ns);
    let rct = objects::workload_template(&cd, &ctx.cfg, &chosen)?;
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
    let drct = objects::daemon_template(&cd, &ctx.cfg, &chosen)?;
    if drct_api
        .get_opt(&drct.name_any())
        .await
        .map_err(kube_err(&cd, "reading the daemon template"))?
        .is_none()
    {
        apply_obj(&drct_api, &drct, &cd, "daemon ResourceClaimTemplate").await?;
    }
    let ds_api: Api<DaemonSet> = Api::namespaced(c.clone(), daemon_ns);
    apply_obj(
        &ds_api,
        &objects::daemonset(&cd, &ctx.cfg, &chosen)?,
        &cd,
        "DaemonSet",
    )
    .await?;

    let pods = Api::<Pod>::namespaced(c.clone(), daemon_ns)
        .list(&ListParams::default().labels(&format!("{DOMAIN_LABEL}={uid}")))
        .await
        .map_err(kube_err(&cd, "listing the daemon pods"))?;
    let st = status::aggregate(&pods.items, &nodes, cd.spec.num_nodes as usize, &chosen);
    let ready_nodes = st
        .nodes
        .iter()
        .filter(|n| n.status == Readiness::Ready)
        .count();
    ctx.metrics
        .ready_nodes
        .get_or_create(&labels)
        .set(ready_nodes as i64);
    ctx.metrics
        .ready
        .get_or_create(&labels)
        .set((st.status == Readiness::Ready) as i64);
    let was = cd.status.as_ref().map(|s| s.status).unwrap_or_default();
    if was != st.status {
        let (t, reason) = match st.status {
            Readiness::Ready => (EventType::Normal, "Ready"),
            Readiness::NotReady => (EventType::Warning, "NotReady"),
        };
        let note = st
            .message
            .clone()
            .unwrap_or_else(|| format!("{ready_nodes} nodes ready in clique {chosen}"));
        event(ctx, &cd, t, reason, note).await;
    }
    set_status(ctx, &cd, &st).await?;
    Ok(Action::requeue(Duration::from_secs(60)))
}

async fn reconcile(cd: Arc<ComputeDomain>, ctx: Arc<Context>) -> Result<Action, Error> {
    let domain = key(&cd);
    let api: Api<ComputeDomain> =
        Api::namespaced(ctx.client.clone(), &cd.namespace().unwrap_or_default());
    let r = finalizer(&api, FINALIZER, cd, |ev| async {
        match ev {
            Finalize::Apply(cd) => apply(cd, &ctx).await,
            Finalize::Cleanup(cd) => crate::cleanup::cleanup(cd, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer {
        domain,
        source: Box::new(e),
    });
    let result = if r.is_ok() { "ok" } else { "error" };
    ctx.metrics
        .reconciles
        .get_or_create(&ResultLabels {
            result: result.into(),
        })
        .inc();
    r
}

fn error_policy(_cd: Arc<ComputeDomain>, e: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %crate::controller::chain(e), "reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// An error with its sources, for logs.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Runs the controller until the future is dropped.
pub async fn run(ctx: Arc<Context>) {
    let c = ctx.client.clone();
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ctx.cfg.namespace);
    let domains: Api<ComputeDomain> = match &ctx.scope {
        Some(ns) => Api::namespaced(c, ns),
        None => Api::all(c),
    };
    Controller::new(domains, watcher::Config::default())
        .watches(
            pods,
            watcher::Config::default().labels(DOMAIN_LABEL),
            |p: Pod| {
                let a = p.metadata.annotations?;
                Some(ObjectRef::new(a.get(NAME_ANNOTATION)?).within(a.get(NAMESPACE_ANNOTATION)?))
            },
        )
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %chain(&e), "controller");
            }
        })
        .await;
}
