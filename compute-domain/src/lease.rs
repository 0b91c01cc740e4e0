//! Leader election through a `coordination.k8s.io/v1` Lease, the way Kubernetes' own
//! controllers do it (client-go's leaderelection): the holder renews `renewTime` well
//! within `leaseDurationSeconds`; another candidate takes the lease only once it has not
//! been renewed for that long. Updates carry the resourceVersion read, so two candidates
//! that race get one success and one conflict.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::Api;

use crate::controller::{run, Context};

/// One candidate for a Lease.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl Elector {
    /// A candidate `identity` for the Lease `namespace/name`, held for `duration`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> Self {
        Elector {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
            duration,
        }
    }

    /// How long the lease is held without renewal.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// Takes or renews the lease; true while this candidate holds it.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let secs = i32::try_from(self.duration.as_secs())
            .unwrap_or(i32::MAX)
            .max(1);
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(secs),
                    acquire_time: Some(now()),
                    renew_time: Some(now()),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(e) if is_conflict(&e) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        let ours = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        if !ours {
            let held = spec.lease_duration_seconds.unwrap_or(secs).max(1);
            let expired = match (&spec.renew_time, spec.holder_identity.as_deref()) {
                (Some(t), Some(h)) if !h.is_empty() => {
                    let held = Duration::from_secs(held.unsigned_abs().into());
                    t.0.checked_add(held)
                        .map(|until| until < Timestamp::now())
                        .unwrap_or(false)
                }
                _ => true,
            };
            if !expired {
                return Ok(false);
            }
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(now());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = Some(now());
        spec.lease_duration_seconds = Some(secs);
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the lease up if this candidate holds it, so that another takes over at once.
    pub async fn release(&self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_conflict(&e) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Waits until this candidate holds the lease, trying every `retry`.
    pub async fn acquire(&self, retry: Duration) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, lease = %self.name, "leader election"),
            }
            tokio::time::sleep(retry).await;
        }
    }

    /// Renews every `retry` while the lease is held; returns once it is lost (not renewed
    /// within its duration, or taken).
    pub async fn hold(&self, retry: Duration) {
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(retry).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_ok = tokio::time::Instant::now(),
                Ok(false) => return,
                Err(e) => {
                    tracing::warn!(error = %e, lease = %self.name, "renewing the lease");
                    // Stop before another candidate may take it.
                    if last_ok.elapsed() + retry >= self.duration {
                        return;
                    }
                }
            }
        }
    }
}

/// The Lease that elects the acting replica.
pub struct Election {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// This replica's identity (its pod name).
    pub identity: String,
    /// How long the lease holds without renewal.
    pub duration: Duration,
    /// How often it is tried or renewed.
    pub retry: Duration,
}

/// Runs the controller while this replica holds the Lease, until `shutdown` completes; then
/// gives the Lease up, so that another replica takes over at once rather than after its
/// duration.
pub async fn run_elected(
    ctx: Arc<Context>,
    election: Election,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let elector = Elector::new(
        ctx.client.clone(),
        &election.namespace,
        &election.name,
        &election.identity,
        election.duration,
    );
    let lead = async {
        loop {
            elector.acquire(election.retry).await;
            tracing::info!(identity = %election.identity, "leading: reconciling ComputeDomains");
            tokio::select! {
                _ = elector.hold(election.retry) => tracing::warn!("lost the lease: stopping"),
                _ = run(ctx.clone()) => tracing::warn!("the controller stopped"),
            }
        }
    };
    tokio::select! {
        _ = lead => {}
        _ = shutdown => {}
    }
    if let Err(e) = elector.release().await {
        tracing::warn!(error = %e, "giving the lease up");
    }
}
