//! The reconcile loop: kube-runtime's Controller over ComputeDomains, woken also by the
//! domains' daemon pods and workload claims; a finalizer so that deletion cleans up (see
//! the crate's docs). What a reconcile does is in `apply`; what it reads, in `cache` and
//! in the records (`record`) loaded when a term of leadership starts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as Finalize};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, Controller};
use kube::{Api, ResourceExt};

use crate::cache::PAGE;
use crate::context::key;
use crate::crd::ComputeDomain;
use crate::metrics::ResultLabels;
use crate::objects::{DOMAIN_LABEL, NAMESPACE_ANNOTATION, NAME_ANNOTATION};
use crate::record::Record;
use crate::term::Term;
use crate::Error;

// The controller's public face as first published; the items live in `context`.
pub use crate::context::{validate, Context, Invalid};

/// The finalizer that holds a domain until its objects are gone.
pub const FINALIZER: &str = "resource.graft.dev/compute-domain";

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
        let term = Arc::new(Term::new(ctx.clone(), caches.clone(), records));
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
