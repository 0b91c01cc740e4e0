//! What every reconcile shares, below the loop that runs them (`controller`) and the steps
//! it calls (`apply`, `cleanup`, `place`, `labels`): the controller's configuration, the
//! Events it posts, the error of a failed API call, and the check of a domain as written.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};

use crate::crd::ComputeDomain;
use crate::metrics::Metrics;
use crate::objects::DaemonConfig;
use crate::policy::SlotPolicy;
use crate::Error;

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
    /// How long a pod allocated a channel waits to be bound (`binding`).
    pub(crate) binding_timeout: Duration,
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
            binding_timeout: Duration::from_secs(300),
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

    /// How long a pod allocated one of the domains' channels waits to be bound before its
    /// binding fails (default 300 s).
    pub fn with_binding_timeout(mut self, timeout: Duration) -> Self {
        self.binding_timeout = timeout;
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
    Ok(())
}
