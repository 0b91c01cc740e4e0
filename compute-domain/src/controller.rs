//! The reconcile loop: kube-runtime's Controller over ComputeDomains, woken also by the
//! domains' daemon pods and workload claims; a finalizer so that deletion cleans up (see
//! the crate's docs). What a reconcile does is in `apply`.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{finalizer, Event as Finalize};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, Controller};
use kube::{Api, Client, Resource, ResourceExt};

use crate::crd::ComputeDomain;
use crate::metrics::{Metrics, ResultLabels};
use crate::objects::{DaemonConfig, DOMAIN_LABEL, NAMESPACE_ANNOTATION, NAME_ANNOTATION};
use crate::Error;

/// The finalizer that holds a domain until its objects are gone.
pub const FINALIZER: &str = "resource.graft.dev/compute-domain";

/// What every reconcile shares.
pub struct Context {
    pub(crate) client: Client,
    pub(crate) cfg: DaemonConfig,
    recorder: Recorder,
    pub(crate) metrics: Metrics,
    pub(crate) scope: Option<String>,
    /// A label selector the watched domains must match (default: every domain).
    pub(crate) selector: Option<String>,
    /// Held while a domain's slot is chosen and written, so that two domains reconciled at
    /// once cannot take the same one.
    pub(crate) placing: tokio::sync::Mutex<()>,
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
            selector: None,
            placing: tokio::sync::Mutex::new(()),
        }
    }

    /// Watches the domains of `namespace` only (default: every namespace).
    pub fn only_namespace(mut self, namespace: &str) -> Self {
        self.scope = Some(namespace.to_string());
        self
    }

    /// Watches only the domains that match the label selector `selector` (a controller for
    /// a part of the cluster's domains, in any namespace).
    pub fn only_labelled(mut self, selector: &str) -> Self {
        self.selector = Some(selector.to_string());
        self
    }

    /// The watch (and list) of the domains this controller serves.
    pub(crate) fn domain_config(&self) -> watcher::Config {
        match &self.selector {
            Some(s) => watcher::Config::default().labels(s),
            None => watcher::Config::default(),
        }
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

pub(crate) async fn event(
    ctx: &Context,
    cd: &ComputeDomain,
    type_: EventType,
    reason: &str,
    note: String,
) {
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

async fn reconcile(cd: Arc<ComputeDomain>, ctx: Arc<Context>) -> Result<Action, Error> {
    let domain = key(&cd);
    let api: Api<ComputeDomain> =
        Api::namespaced(ctx.client.clone(), &cd.namespace().unwrap_or_default());
    let r = finalizer(&api, FINALIZER, cd, |ev| async {
        match ev {
            Finalize::Apply(cd) => crate::apply::apply(cd, &ctx).await,
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

/// The domain an object's annotations name (daemon pods, workload claims).
fn domain_of(
    a: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<ObjectRef<ComputeDomain>> {
    let a = a?;
    Some(ObjectRef::new(a.get(NAME_ANNOTATION)?).within(a.get(NAMESPACE_ANNOTATION)?))
}

/// Runs the controller until the future is dropped.
pub async fn run(ctx: Arc<Context>) {
    let c = ctx.client.clone();
    let pods: Api<Pod> = Api::namespaced(c.clone(), &ctx.cfg.namespace);
    let domains: Api<ComputeDomain> = match &ctx.scope {
        Some(ns) => Api::namespaced(c, ns),
        None => Api::all(c),
    };
    // The domains' workload claims (their template labels and annotates them): an
    // allocation or deallocation may add or free a node of the domain.
    let claims: Api<ResourceClaim> = match &ctx.scope {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    Controller::new(domains, ctx.domain_config())
        .watches(
            pods,
            watcher::Config::default().labels(DOMAIN_LABEL),
            |p: Pod| domain_of(p.metadata.annotations.as_ref()),
        )
        .watches(
            claims,
            watcher::Config::default().labels(DOMAIN_LABEL),
            |c: ResourceClaim| domain_of(c.metadata.annotations.as_ref()),
        )
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %chain(&e), "controller");
            }
        })
        .await;
}
