//! The extender's metrics (`graft_scheduler_extender_*`).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::index::PoolGpus;

/// A call, as metric labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// The verb: `prioritize`, `other` for a path the extender does not serve, or
    /// `connection` for a connection closed unserved because too many were open.
    pub verb: String,
    /// `scored` (the pod asks for GPUs), `none` (it does not), `not_ready`, `bad_request`,
    /// `too_large`, `slow`, `busy` (refused for want of a slot) or `error`; for a
    /// connection, `refused`, `handshake_failed` (no or a wrong client certificate) or
    /// `slow` (no TLS handshake in time).
    pub outcome: String,
}

/// The extender's metrics.
#[derive(Clone)]
pub struct Metrics {
    /// Calls, by verb and outcome.
    pub calls: Family<CallLabels, Counter>,
    /// Seconds per call, reading the request included.
    pub duration: Histogram,
    /// Whole GPUs and their fragmentation, per node pool.
    pub fleet: Fleet,
}

/// A node pool, as metric labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    /// The node's `--pool-label` value (`none` without it).
    pub pool: String,
}

/// The fleet gauges, per node pool, set from the index by [`Fleet::set`].
#[derive(Clone, Default)]
pub struct Fleet {
    /// Whole GPUs.
    pub gpus: Family<PoolLabels, Gauge>,
    /// Whole GPUs no claim holds.
    pub free: Family<PoolLabels, Gauge>,
    /// Free GPUs on partly used nodes over all free GPUs.
    pub fragmentation: Family<PoolLabels, Gauge<f64, AtomicU64>>,
    /// The pools set last, so that a pool gone is dropped rather than left at its last
    /// values.
    shown: Arc<Mutex<Vec<String>>>,
}

impl Fleet {
    /// Shows `pools`, and no other.
    pub fn set(&self, pools: &BTreeMap<String, PoolGpus>) {
        let mut shown = self.shown.lock().unwrap_or_else(PoisonError::into_inner);
        for gone in shown.iter().filter(|p| !pools.contains_key(*p)) {
            let l = PoolLabels { pool: gone.clone() };
            self.gpus.remove(&l);
            self.free.remove(&l);
            self.fragmentation.remove(&l);
        }
        for (pool, p) in pools {
            let l = PoolLabels { pool: pool.clone() };
            self.gpus.get_or_create(&l).set(p.gpus as i64);
            self.free.get_or_create(&l).set(p.free as i64);
            self.fragmentation.get_or_create(&l).set(p.fragmentation());
        }
        *shown = pools.keys().cloned().collect();
    }
}

impl Metrics {
    /// New metrics, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Metrics {
            calls: Family::default(),
            duration: Histogram::new(graft_telemetry::request_buckets()),
            fleet: Fleet::default(),
        };
        registry.register(
            "graft_scheduler_extender_calls",
            "Calls from kube-scheduler, by verb and outcome",
            m.calls.clone(),
        );
        registry.register(
            "graft_scheduler_extender_call_duration_seconds",
            "Time to answer a call from kube-scheduler",
            m.duration.clone(),
        );
        registry.register(
            "graft_scheduler_extender_gpus",
            "Whole graft GPUs per node pool",
            m.fleet.gpus.clone(),
        );
        registry.register(
            "graft_scheduler_extender_free_gpus",
            "Whole graft GPUs no claim holds, per node pool",
            m.fleet.free.clone(),
        );
        registry.register(
            "graft_scheduler_extender_fragmentation_ratio",
            "Share of the free GPUs that sit on partly used nodes (stranded for whole-node requests), per node pool; 0 when none is free",
            m.fleet.fragmentation.clone(),
        );
        m
    }

    /// Counts one call.
    pub fn count(&self, verb: &str, outcome: &str) {
        self.calls
            .get_or_create(&CallLabels {
                verb: verb.into(),
                outcome: outcome.into(),
            })
            .inc();
    }
}

/// How often the fleet gauges are recomputed: a walk over every node, so not per scrape.
pub const FLEET_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Sets the fleet gauges from `index` every [`FLEET_EVERY`], until dropped.
pub async fn keep_fleet(index: Arc<crate::index::Index>, fleet: Fleet) {
    let mut tick = tokio::time::interval(FLEET_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        fleet.set(&index.pools());
    }
}

#[cfg(test)]
mod tests;
