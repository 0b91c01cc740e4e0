//! The reconcile loop: kube-runtime's Controller over ComputeDomains, woken also by the
//! domains' daemon pods and workload claims; a finalizer so that deletion cleans up (see
//! the crate's docs). What a reconcile does is in `apply`; what it reads, in `cache` and
//! in the records (`record`) loaded when a term of leadership starts.

use std::collections::{BTreeMap, HashMap};
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{finalizer, Event as Finalize};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, Controller};
use kube::{Api, Client, Resource, ResourceExt};

use crate::cache::{Caches, PAGE};
use crate::crd::{ComputeDomain, ComputeDomainStatus};
use crate::metrics::{Metrics, ResultLabels};
use crate::objects::{DaemonConfig, DOMAIN_LABEL, NAMESPACE_ANNOTATION, NAME_ANNOTATION};
use crate::policy::SlotPolicy;
use crate::record::Record;
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
    /// The limits on slots.
    pub(crate) policy: SlotPolicy,
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
            policy: SlotPolicy::default(),
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

    /// Limits the slots a namespace holds and how long an empty domain keeps one.
    pub fn with_slot_policy(mut self, policy: SlotPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The watch of the domains this controller serves.
    pub(crate) fn domain_config(&self) -> watcher::Config {
        match &self.selector {
            Some(s) => watcher::Config::default().labels(s),
            None => watcher::Config::default(),
        }
    }
}

/// One term of leadership: its caches and the domains' records, shared by its reconciles.
pub(crate) struct Term {
    ctx: Arc<Context>,
    pub(crate) caches: Caches,
    /// The records by domain uid, as last written. Held for the whole of a reconcile, so
    /// that two domains cannot take one slot, and a slot is not taken from a domain while
    /// its objects are written.
    pub(crate) records: tokio::sync::Mutex<BTreeMap<String, Record>>,
    /// The status last written for each domain, by uid.
    pub(crate) reported: std::sync::Mutex<HashMap<String, ComputeDomainStatus>>,
}

impl Deref for Term {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.ctx
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
    event_on(ctx, &cd.object_ref(&()), type_, reason, note).await;
}

/// An Event about the object `on` (a domain this reconcile did not get).
pub(crate) async fn event_on(
    ctx: &Context,
    on: &ObjectReference,
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
    if let Err(e) = ctx.recorder.publish(&ev, on).await {
        let on = format!(
            "{}/{}",
            on.namespace.as_deref().unwrap_or_default(),
            on.name.as_deref().unwrap_or_default()
        );
        tracing::warn!(object = %on, error = %e, "publishing an Event");
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

async fn reconcile(cd: Arc<ComputeDomain>, ctx: Arc<Term>) -> Result<Action, Error> {
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

fn error_policy(_cd: Arc<ComputeDomain>, e: &Error, _ctx: Arc<Term>) -> Action {
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

/// The records in graft's namespace, page by page; a malformed one is skipped (named in
/// the log).
async fn load_records(ctx: &Context) -> Result<BTreeMap<String, Record>, kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.cfg.namespace);
    let mut records = BTreeMap::new();
    let mut lp = ListParams::default().labels(DOMAIN_LABEL).limit(100);
    loop {
        let page = api.list(&lp).await?;
        for cm in &page.items {
            match Record::from_config_map(cm) {
                Ok((uid, r)) => {
                    records.insert(uid, r);
                }
                Err(e) => tracing::warn!(error = %e, "skipping a record"),
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => lp = lp.continue_token(&next),
            None => return Ok(records),
        }
    }
}

/// Runs the controller until the future is dropped: its caches first, then the records,
/// then the reconciles.
pub async fn run(ctx: Arc<Context>) {
    let (caches, keep) = crate::cache::start(&ctx);
    let serve = async {
        if !caches.ready().await {
            return;
        }
        let records = match load_records(&ctx).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %chain(&e), "loading the domains' records");
                tokio::time::sleep(Duration::from_secs(5)).await;
                return;
            }
        };
        let term = Arc::new(Term {
            ctx: ctx.clone(),
            caches: caches.clone(),
            records: tokio::sync::Mutex::new(records),
            reported: Default::default(),
        });
        reconcile_all(term).await;
    };
    tokio::select! {
        _ = keep => tracing::warn!("the caches' watches ended"),
        _ = serve => {}
    }
}

async fn reconcile_all(ctx: Arc<Term>) {
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
    // Every watch lists in small pages; the two others keep nothing.
    let labelled = || {
        watcher::Config::default()
            .labels(DOMAIN_LABEL)
            .page_size(PAGE)
    };
    Controller::new(domains, ctx.domain_config().page_size(PAGE))
        .watches(pods, labelled(), |p: Pod| {
            domain_of(p.metadata.annotations.as_ref())
        })
        .watches(claims, labelled(), |c: ResourceClaim| {
            domain_of(c.metadata.annotations.as_ref())
        })
        .run(reconcile, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %chain(&e), "controller");
            }
        })
        .await;
}
