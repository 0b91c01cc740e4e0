//! graft-driver's Prometheus metrics. Labels come from fixed sets (XIDs up to 4 digits).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::sync::{watch, Notify};

use crate::claims::Core;
use crate::health::{Condition, HealthReport};
use crate::model::Device;

mod devices;
mod health_events;
pub mod prepare;
mod tasks;
pub mod usage;

pub use devices::class;
use devices::{all_classes, DeviceLabels, HEALTHS};
use health_events::{event_labels, EventLabels};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabel {
    backend: &'static str,
}

/// A failing discovery backend, for the readiness body: name, since when, last error.
pub type FailingBackend = (&'static str, SystemTime, String);

type Histograms = Family<ResultLabel, Histogram, fn() -> Histogram>;

fn call_histogram() -> Histogram {
    Histogram::new(graft_telemetry::request_buckets())
}

/// graft-driver's metrics, each series made up front.
pub struct DriverMetrics {
    prepare: Histograms,
    unprepare: Histograms,
    prepares: prepare::PrepareCounts,
    prepared_claims: Gauge,
    records: Gauge,
    devices: Family<DeviceLabels, Gauge>,
    health_events: Family<EventLabels, Counter>,
    nri_connected: Gauge,
    slices_published: Counter,
    publish_errors: Counter,
    /// Set once the first ResourceSlices are in place.
    published: AtomicBool,
    /// Woken after each prepare and unprepare: the counts are read again.
    counts_changed: Notify,
    discovery_up: Family<BackendLabel, Gauge>,
    discovery_failures: Family<BackendLabel, Counter>,
    failing_backends: Mutex<Vec<FailingBackend>>,
    served_dirs_refused: Gauge,
    tasks_ended: tasks::TaskCounts,
    usage: Arc<usage::UsageMetrics>,
}

impl Default for DriverMetrics {
    fn default() -> Self {
        let histograms = || -> Histograms {
            let h: Histograms = Family::new_with_constructor(call_histogram as fn() -> Histogram);
            for result in ["ok", "error"] {
                let _ = h.get_or_create(&ResultLabel { result });
            }
            h
        };
        let devices = Family::<DeviceLabels, Gauge>::default();
        for class in all_classes() {
            for health in HEALTHS {
                let _ = devices.get_or_create(&DeviceLabels { class, health });
            }
        }
        DriverMetrics {
            prepare: histograms(),
            unprepare: histograms(),
            prepares: Default::default(),
            prepared_claims: Gauge::default(),
            records: Gauge::default(),
            devices,
            health_events: Family::default(),
            nri_connected: Gauge::default(),
            slices_published: Counter::default(),
            publish_errors: Counter::default(),
            published: AtomicBool::new(false),
            counts_changed: Notify::new(),
            discovery_up: Family::default(),
            discovery_failures: Family::default(),
            failing_backends: Mutex::new(Vec::new()),
            served_dirs_refused: Gauge::default(),
            tasks_ended: Default::default(),
            usage: Default::default(),
        }
    }
}

impl DriverMetrics {
    /// Adds every metric to `r`.
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "graft_driver_prepare_duration_seconds",
            "Time to prepare a claim (the whole kubelet call it came in), by result",
            self.prepare.clone(),
        );
        r.register(
            "graft_driver_unprepare_duration_seconds",
            "Time to unprepare a claim (the whole kubelet call it came in), by result",
            self.unprepare.clone(),
        );
        self.prepares.register(r);
        r.register(
            "graft_driver_prepared_claims",
            "Claims prepared on this node (the checkpoint's completed entries)",
            self.prepared_claims.clone(),
        );
        r.register(
            "graft_driver_records",
            "Claim records graft-nri injects from",
            self.records.clone(),
        );
        r.register(
            "graft_driver_devices",
            "Devices published, by DeviceClass (the chart's most specific class that selects the device) and health (healthy, degraded, unhealthy)",
            self.devices.clone(),
        );
        r.register(
            "graft_driver_health_events",
            "Device health changes, by kind (xid with its number, a health reason such as ecc-double-bit or gpu-lost, recovered) and XID",
            self.health_events.clone(),
        );
        r.register(
            "graft_driver_nri_plugin_connected",
            "1 while graft-nri's status file says connected and synchronized (prepares fail otherwise)",
            self.nri_connected.clone(),
        );
        r.register(
            "graft_driver_slices_published",
            "ResourceSlice reconciles that wrote the node's slices",
            self.slices_published.clone(),
        );
        r.register(
            "graft_driver_slice_publish_errors",
            "ResourceSlice reconciles that failed (retried with backoff)",
            self.publish_errors.clone(),
        );
        r.register(
            "graft_driver_discovery_backend_up",
            "1 while the discovery backend's last scan worked; 0 while it fails (its last devices stay published)",
            self.discovery_up.clone(),
        );
        r.register(
            "graft_driver_discovery_failures",
            "Discovery scans that failed, by backend",
            self.discovery_failures.clone(),
        );
        r.register(
            "graft_driver_served_dirs_refused",
            "Served directories (files backend) refused because another account than root could change them (the log names each)",
            self.served_dirs_refused.clone(),
        );
        self.tasks_ended.register(r);
        self.usage.register(r);
    }

    /// A long-running task ended before shutdown ([`crate::daemon`]); and how many times.
    pub fn task_ended(&self, task: &'static str) {
        self.tasks_ended.ended(task);
    }
    /// How many times `task` ended before shutdown.
    pub fn tasks_ended(&self, task: &'static str) -> u64 {
        self.tasks_ended.get(task)
    }

    /// The per-pod GPU usage gauges, which [`usage::run`] keeps.
    pub fn usage(&self) -> Arc<usage::UsageMetrics> {
        self.usage.clone()
    }

    /// The files backend's count of refused served directories.
    pub fn served_dirs_refused(&self) -> Gauge {
        self.served_dirs_refused.clone()
    }

    /// A discovery pass: each backend's state, those failed this time, those failing now.
    pub fn discovery_scanned(
        &self,
        up: &[(&'static str, bool)],
        failed: &[&'static str],
        failing: Vec<FailingBackend>,
    ) {
        for &(backend, ok) in up {
            self.discovery_up
                .get_or_create(&BackendLabel { backend })
                .set(ok as i64);
            // Present from the first scan, so that a rate has a start.
            let _ = self
                .discovery_failures
                .get_or_create(&BackendLabel { backend });
        }
        for &backend in failed {
            self.discovery_failures
                .get_or_create(&BackendLabel { backend })
                .inc();
        }
        *self
            .failing_backends
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = failing;
    }

    /// The discovery backends failing now.
    pub fn failing_backends(&self) -> Vec<FailingBackend> {
        self.failing_backends
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// One claim's prepare (`ok`: devices returned) that took `elapsed`.
    pub fn prepared(&self, ok: bool, elapsed: Duration) {
        observe(&self.prepare, ok, elapsed);
    }

    /// `claims` claims' prepare begins: counted in flight until the guard is dropped.
    pub fn prepare_started(&self, claims: usize) -> prepare::InFlight {
        self.prepares.started(claims)
    }

    /// `claims` claims' prepare failed for `reason` (one of [`prepare::REASONS`]).
    pub fn prepare_failed(&self, reason: &'static str, claims: usize) {
        self.prepares.failed(reason, claims);
    }

    /// One claim's unprepare (`ok`: it succeeded) that took `elapsed`.
    pub fn unprepared(&self, ok: bool, elapsed: Duration) {
        observe(&self.unprepare, ok, elapsed);
    }

    /// Claims changed: the counts are read again soon.
    pub fn claims_changed(&self) {
        self.counts_changed.notify_one();
    }

    /// A reconcile's outcome (`Ok(true)`: it wrote slices).
    pub fn reconciled(&self, outcome: Result<bool, ()>) {
        match outcome {
            Ok(wrote) => {
                if wrote {
                    self.slices_published.inc();
                }
                self.published.store(true, Ordering::Relaxed);
            }
            Err(()) => {
                self.publish_errors.inc();
            }
        }
    }

    /// The first ResourceSlices are in place.
    pub fn published(&self) -> bool {
        self.published.load(Ordering::Relaxed)
    }

    fn set_devices(&self, devices: &[Device], health: &HealthReport) {
        let mut counts: BTreeMap<(&'static str, &'static str), i64> = BTreeMap::new();
        for d in devices {
            let h = match health.get(&d.name).map(|h| h.condition) {
                Some(Condition::Unhealthy) => "unhealthy",
                Some(Condition::Degraded) => "degraded",
                None => "healthy",
            };
            *counts.entry((class(d), h)).or_default() += 1;
        }
        for class in all_classes() {
            for health in HEALTHS {
                let n = counts.get(&(class, health)).copied().unwrap_or(0);
                self.devices
                    .get_or_create(&DeviceLabels { class, health })
                    .set(n);
            }
        }
    }

    /// Counts each device whose condition or reason changed from `before` to `now`.
    fn count_health_events(
        &self,
        before: &HealthReport,
        now: &HealthReport,
        reasons: &[&'static str],
    ) {
        for (name, h) in &now.devices {
            let same = before
                .get(name)
                .is_some_and(|b| b.condition == h.condition && b.reason == h.reason);
            if !same {
                self.health_events
                    .get_or_create(&event_labels(&h.reason, reasons))
                    .inc();
            }
        }
        for name in before.devices.keys() {
            if now.get(name).is_none() {
                self.health_events
                    .get_or_create(&EventLabels {
                        kind: "recovered",
                        xid: String::new(),
                    })
                    .inc();
            }
        }
    }
}

fn observe(h: &Histograms, ok: bool, elapsed: Duration) {
    let result = if ok { "ok" } else { "error" };
    h.get_or_create(&ResultLabel { result })
        .observe(elapsed.as_secs_f64());
}

/// Keeps the device gauges and health event counts up to date with the inventory and health;
/// `reasons` are the families' health reasons ([`crate::backend::Backend::health_reasons`]).
pub async fn watch_devices(
    metrics: Arc<DriverMetrics>,
    mut inventory: watch::Receiver<Vec<Device>>,
    mut health: watch::Receiver<HealthReport>,
    reasons: Vec<&'static str>,
) {
    let mut last = HealthReport::default();
    loop {
        {
            let devices = inventory.borrow_and_update();
            let now = health.borrow_and_update();
            metrics.count_health_events(&last, &now, &reasons);
            metrics.set_devices(&devices, &now);
            last = now.clone();
        }
        tokio::select! {
            r = inventory.changed() => if r.is_err() { return },
            r = health.changed() => if r.is_err() { return },
        }
    }
}

/// Keeps claim counts and graft-nri's state current: after each (un)prepare and every `every`.
pub async fn keep_counts(
    metrics: Arc<DriverMetrics>,
    core: Arc<Core>,
    nri: Arc<dyn Fn() -> bool + Send + Sync>,
    every: Duration,
) {
    loop {
        let (c, n) = (core.clone(), nri.clone());
        match tokio::task::spawn_blocking(move || (c.counts(), n())).await {
            Ok((Ok((prepared, records)), connected)) => {
                metrics.prepared_claims.set(prepared as i64);
                metrics.records.set(records as i64);
                metrics.nri_connected.set(connected as i64);
            }
            Ok((Err(e), connected)) => {
                metrics.nri_connected.set(connected as i64);
                tracing::debug!(error = %e, "cannot count claims for the metrics");
            }
            Err(e) => tracing::debug!(error = %e, "counting claims failed internally"),
        }
        tokio::select! {
            _ = metrics.counts_changed.notified() => {}
            _ = tokio::time::sleep(every) => {}
        }
    }
}

#[cfg(test)]
mod tests;
