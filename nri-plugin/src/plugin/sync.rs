//! Synchronize: the runtime's running containers against their records. One that runs
//! without what its records say it must have is logged, counted and evicted through
//! UpdateContainers, from a task of its own after the reply; one the runtime leaves running
//! is reported.
//!
//! Such a container is how a killed graft-nri shows: containerd's NRI (v0.11, v0.12) counts
//! a plugin whose connection broke as having answered a CreateContainer with no changes,
//! and its validator counts it as present, so the next container made after graft-nri died
//! starts without graft's edits. containerd 2.2 and 2.4 drop a plugin's evictions (the
//! adaptation keeps only adjustments and updates, of its own requests and of answers
//! alike), so graft-nri alone can only report it. graft's validator (`validator.rs`)
//! refuses such a container on containerd 2.2+ (`tests/suite/nri_killed_bursts.rs`), so
//! this report is what remains on containerd 1.7 and where the validator is turned off.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use graft_nri_sdk::{spawn_logged, Runtime};
use graft_proto::nri;
use graft_record::StatusPublisher;

use super::{GraftPlugin, Stats};
use crate::metrics::NriMetrics;
use crate::verify;

/// An eviction asked for and not yet seen to happen.
#[derive(Debug, Clone)]
pub(super) struct PendingEviction {
    reason: String,
}

impl GraftPlugin {
    /// [`graft_nri_sdk::NriPlugin::synchronize`].
    pub(super) async fn synchronize_with(
        &self,
        runtime: Runtime,
        pods: Vec<nri::PodSandbox>,
        containers: Vec<nri::Container>,
    ) -> ttrpc::Result<Vec<nri::ContainerUpdate>> {
        let started = Instant::now();
        self.sweep_leftovers(&containers);
        // Record reads may hang (a stuck filesystem): they run on a blocking thread, and
        // Synchronize answers without the ones that miss the limit.
        let uids = verify::pods_to_check(&pods, &containers);
        let claims =
            verify::read_within(self.store.clone(), uids.clone(), self.sync_read_limit()).await;
        let found = verify::uninjected(&pods, &containers, &claims, &self.policy);
        let unread: Vec<String> = uids
            .into_iter()
            .filter(|u| !claims.contains_key(u))
            .collect();
        if !unread.is_empty() {
            self.verify_later(runtime.clone(), unread, pods.clone(), containers.clone());
        }
        tracing::info!(
            pods = pods.len(),
            containers = containers.len(),
            uninjected = found.len(),
            elapsed_us = started.elapsed().as_micros() as u64,
            "synchronized with the runtime"
        );
        if found.is_empty() {
            return Ok(Vec::new());
        }
        self.evict(runtime, found);
        Ok(Vec::new())
    }

    /// Counts `found`, keeps each as a pending eviction and asks the runtime for them.
    fn evict(&self, runtime: Runtime, found: Vec<(nri::Container, String)>) {
        self.evictor().evict(runtime, found)
    }

    fn evictor(&self) -> Evictor {
        Evictor {
            pending: self.pending.clone(),
            stats: self.stats.clone(),
            metrics: self.metrics.clone(),
            status: self.status.clone(),
            grace: self.eviction_grace,
        }
    }

    /// Verifies, after the Synchronize answer, the pods whose records were not read in
    /// time for it: the containers a killed graft-nri let start are among the pods being
    /// made at that moment, when the node is busiest, so they are not left unchecked.
    fn verify_later(
        &self,
        runtime: Runtime,
        uids: Vec<String>,
        pods: Vec<nri::PodSandbox>,
        containers: Vec<nri::Container>,
    ) {
        let store = self.store.clone();
        let policy = self.policy.clone();
        let evictor = self.evictor();
        spawn_logged("late verification", async move {
            let read = tokio::task::spawn_blocking(move || {
                let claims = verify::read_now(&store, &uids);
                verify::uninjected(&pods, &containers, &claims, &policy)
            })
            .await;
            match read {
                Ok(found) if !found.is_empty() => evictor.evict(runtime, found),
                Ok(_) => tracing::info!("pods unread at Synchronize verified later: all injected"),
                Err(e) => tracing::error!(error = %e, "verifying the pods unread at Synchronize"),
            }
        });
    }

    /// A stopped or removed container: an eviction asked for it has happened.
    pub(super) fn eviction_done(&self, id: &str) {
        let removed = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        if removed.is_some() {
            tracing::info!(container = %id, "evicted container has stopped");
        }
    }

    /// How long Synchronize waits for records: half the runtime's registration timeout
    /// (containerd: 5 s), which Synchronize must answer within.
    fn sync_read_limit(&self) -> Duration {
        match self.registration_timeout_ms.load(Ordering::Relaxed) {
            0 => Duration::from_secs(2),
            ms => Duration::from_millis(ms / 2),
        }
    }

    /// Containers that run without what their records say they must have, reading the
    /// records here (tests and benchmarks; Synchronize reads them with a deadline).
    pub fn find_uninjected(
        &self,
        pods: &[nri::PodSandbox],
        containers: &[nri::Container],
    ) -> Vec<(nri::Container, String)> {
        let claims = verify::read_now(&self.store, &verify::pods_to_check(pods, containers));
        verify::uninjected(pods, containers, &claims, &self.policy)
    }
}

/// What evicting needs, for the tasks that outlive a request.
struct Evictor {
    pending: Arc<Mutex<HashMap<String, PendingEviction>>>,
    stats: Arc<Stats>,
    metrics: Arc<NriMetrics>,
    status: Arc<Mutex<StatusPublisher>>,
    grace: Duration,
}

impl Evictor {
    /// Counts `found`, keeps each as a pending eviction and asks the runtime for them.
    fn evict(&self, runtime: Runtime, found: Vec<(nri::Container, String)>) {
        self.stats
            .uninjected_found
            .fetch_add(found.len() as u64, Ordering::Relaxed);
        self.metrics.uninjected_found(found.len() as u64);
        self.stats
            .evictions_requested
            .fetch_add(found.len() as u64, Ordering::Relaxed);
        let mut evict = Vec::new();
        {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            for (ctr, reason) in &found {
                tracing::warn!(container = %ctr.id, "{reason}; evicting it");
                pending.insert(
                    ctr.id.clone(),
                    PendingEviction {
                        reason: reason.clone(),
                    },
                );
                evict.push(nri::ContainerEviction {
                    container_id: ctr.id.clone(),
                    reason: reason.clone(),
                    ..Default::default()
                });
            }
        }
        super::set_status(&self.status, |s| {
            s.uninjected_found += found.len() as u64;
        });
        self.spawn(runtime, evict);
    }

    /// Sends evictions from a task of its own, after the Synchronize reply has gone out,
    /// and reports the ones the runtime leaves running. The task ends after the grace
    /// period; should it panic, that is logged.
    fn spawn(&self, runtime: Runtime, evict: Vec<nri::ContainerEviction>) {
        let pending = self.pending.clone();
        let grace = self.grace;
        spawn_logged("evictions", async move {
            // The runtime holds its NRI lock until our Synchronize reply is in; a call
            // made now would only queue behind it.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let ids: Vec<String> = evict.iter().map(|e| e.container_id.clone()).collect();
            match runtime.update_containers(Vec::new(), evict).await {
                Ok(_) => tracing::info!(containers = ?ids, "asked the runtime to evict containers"),
                Err(e) => {
                    tracing::warn!(containers = ?ids, error = %e, "UpdateContainers(evict) failed")
                }
            }
            tokio::time::sleep(grace).await;
            let still: Vec<String> = {
                let p = pending.lock().unwrap_or_else(|p| p.into_inner());
                ids.into_iter().filter(|id| p.contains_key(id)).collect()
            };
            let mut p = pending.lock().unwrap_or_else(|p| p.into_inner());
            for id in still {
                let reason = p.remove(&id).map(|e| e.reason).unwrap_or_default();
                // containerd (2.2, 2.4) drops plugins' evictions; the container keeps
                // running without its devices until someone stops it.
                tracing::error!(container = %id,
                    "the runtime did not act on the eviction request within {grace:?}; \
                     the container still runs without its devices and must be restarted \
                     by hand: {reason}");
            }
        });
    }
}
