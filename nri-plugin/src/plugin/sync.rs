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
    /// [`graft_nri_sdk::NriPlugin::synchronize`], which the SDK runs after it has answered
    /// the runtime (graft-nri promises no updates): containerd holds its NRI lock until the
    /// answer is in, so no container on the node is created meanwhile, and decoding the
    /// request for a thousand containers takes 2 ms, reading their pods' records 15 to 20 ms
    /// on a 2-vCPU node (longer on a slow disk). What the check finds is sent afterwards
    /// anyway (evictions).
    pub(super) async fn synchronize_with(
        &self,
        runtime: Runtime,
        pods: Vec<nri::PodSandbox>,
        containers: Vec<nri::Container>,
    ) -> ttrpc::Result<Vec<nri::ContainerUpdate>> {
        let started = Instant::now();
        self.sweep_leftovers(&containers);
        let uids = verify::pods_to_check(&pods, &containers);
        tracing::info!(
            pods = pods.len(),
            containers = containers.len(),
            to_verify = uids.len(),
            elapsed_us = started.elapsed().as_micros() as u64,
            "synchronized with the runtime; verifying its containers after the answer"
        );
        self.verify_after_answer(runtime, uids, pods, containers);
        Ok(Vec::new())
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

    /// Checks the pods `uids` of a Synchronize from a task of its own: the records are read
    /// on blocking threads, a container that runs without what they say is evicted, and the
    /// status file then counts the Synchronize as verified.
    fn verify_after_answer(
        &self,
        runtime: Runtime,
        uids: Vec<String>,
        pods: Vec<nri::PodSandbox>,
        containers: Vec<nri::Container>,
    ) {
        let store = self.store.clone();
        let policy = self.policy.clone();
        let evictor = self.evictor();
        spawn_logged("Synchronize verification", async move {
            let started = Instant::now();
            let read = tokio::task::spawn_blocking(move || {
                let claims = verify::read_now(&store, &uids);
                verify::uninjected(&pods, &containers, &claims, &policy)
            })
            .await;
            match read {
                Ok(found) => {
                    tracing::info!(
                        uninjected = found.len(),
                        elapsed_us = started.elapsed().as_micros() as u64,
                        "verified the runtime's running containers against their records"
                    );
                    if !found.is_empty() {
                        evictor.evict(runtime, found);
                    }
                }
                Err(e) => tracing::error!(error = %e, "verifying the runtime's containers"),
            }
            super::set_status(&evictor.status, |s| s.verified_syncs += 1);
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

    /// Containers that run without what their records say they must have, reading the
    /// records here (tests and benchmarks; Synchronize reads them after its answer).
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
