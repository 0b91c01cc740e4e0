//! graft-nri's Prometheus metrics. Every label value is one of a fixed set, and each
//! labelled series is created once up front: the CreateContainer path only bumps atomics
//! and observes one histogram.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// A request from the runtime, as the `event` label names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// The runtime asks which events the plugin wants.
    Configure,
    /// The runtime lists its pods and containers (on each connection).
    Synchronize,
    /// A container is about to be created: graft injects here.
    CreateContainer,
    /// A container is being stopped.
    StopContainer,
    /// A container was removed.
    RemoveContainer,
    /// Any other lifecycle event (graft subscribes to none).
    Other,
}

impl RequestKind {
    const ALL: [RequestKind; 6] = [
        RequestKind::Configure,
        RequestKind::Synchronize,
        RequestKind::CreateContainer,
        RequestKind::StopContainer,
        RequestKind::RemoveContainer,
        RequestKind::Other,
    ];

    /// The value of the `event` label.
    pub fn label(self) -> &'static str {
        match self {
            RequestKind::Configure => "configure",
            RequestKind::Synchronize => "synchronize",
            RequestKind::CreateContainer => "create_container",
            RequestKind::StopContainer => "stop_container",
            RequestKind::RemoveContainer => "remove_container",
            RequestKind::Other => "other",
        }
    }
}

/// Why a container was refused, as the `reason` label names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The pod's records could not be read.
    RecordUnreadable,
    /// The records conflict or ask for something the policy does not allow.
    RecordRejected,
    /// A served directory's entries are not what graft-driver checked.
    SourceNotServed,
    /// A recorded device is gone from the node.
    DeviceAbsent,
    /// graft-nri failed internally (a panic in the handler).
    Internal,
    /// The container asks NVIDIA's container toolkit for GPUs graft did not give it
    /// (`--unclaimed-gpu-requests=refuse`).
    UnclaimedGpuRequest,
}

impl Refusal {
    const ALL: [Refusal; 6] = [
        Refusal::RecordUnreadable,
        Refusal::RecordRejected,
        Refusal::SourceNotServed,
        Refusal::DeviceAbsent,
        Refusal::Internal,
        Refusal::UnclaimedGpuRequest,
    ];

    /// The value of the `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::RecordUnreadable => "record_unreadable",
            Refusal::RecordRejected => "record_rejected",
            Refusal::SourceNotServed => "source_not_served",
            Refusal::DeviceAbsent => "device_absent",
            Refusal::Internal => "internal",
            Refusal::UnclaimedGpuRequest => "unclaimed_gpu_request",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabel {
    event: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn request_histogram() -> Histogram {
    Histogram::new(graft_telemetry::request_buckets())
}

/// The metrics; cheap to share (`Arc`), registered once with [`NriMetrics::register`].
pub struct NriMetrics {
    durations: HistogramFamily<EventLabel>,
    by_kind: Vec<Histogram>,
    injected: Counter,
    refused: Family<ReasonLabel, Counter>,
    refused_by: Vec<Counter>,
    skipped: Counter,
    gpu_requests_cleared: Counter,
    connected: Gauge,
    synchronized: Gauge,
    reconnects: Counter,
    deadline_exceeded: Counter,
    uninjected_found: Counter,
    ever_configured: AtomicBool,
}

impl Default for NriMetrics {
    fn default() -> Self {
        let durations: HistogramFamily<EventLabel> =
            Family::new_with_constructor(request_histogram as fn() -> Histogram);
        let by_kind = RequestKind::ALL
            .iter()
            .map(|k| durations.get_or_create_owned(&EventLabel { event: k.label() }))
            .collect();
        let refused = Family::<ReasonLabel, Counter>::default();
        let refused_by = Refusal::ALL
            .iter()
            .map(|r| refused.get_or_create_owned(&ReasonLabel { reason: r.label() }))
            .collect();
        NriMetrics {
            durations,
            by_kind,
            injected: Counter::default(),
            refused,
            refused_by,
            skipped: Counter::default(),
            gpu_requests_cleared: Counter::default(),
            connected: Gauge::default(),
            synchronized: Gauge::default(),
            reconnects: Counter::default(),
            deadline_exceeded: Counter::default(),
            uninjected_found: Counter::default(),
            ever_configured: AtomicBool::new(false),
        }
    }
}

impl NriMetrics {
    /// Adds every metric to `r`.
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "graft_nri_request_duration_seconds",
            "Time to answer a request from the container runtime, by event",
            self.durations.clone(),
        );
        r.register(
            "graft_nri_containers_injected",
            "Containers created with the devices recorded for them",
            self.injected.clone(),
        );
        r.register(
            "graft_nri_containers_refused",
            "Containers refused at creation, by reason",
            self.refused.clone(),
        );
        r.register(
            "graft_nri_containers_skipped",
            "Containers created unchanged: nothing recorded for them, no GPU request to clear",
            self.skipped.clone(),
        );
        r.register(
            "graft_nri_gpu_requests_cleared",
            "Containers graft gives no GPU whose requests to NVIDIA's container toolkit \
             were cleared (--unclaimed-gpu-requests=clear)",
            self.gpu_requests_cleared.clone(),
        );
        r.register(
            "graft_nri_connected",
            "1 while registered with the container runtime",
            self.connected.clone(),
        );
        r.register(
            "graft_nri_synchronized",
            "1 once the current connection's initial Synchronize is answered",
            self.synchronized.clone(),
        );
        r.register(
            "graft_nri_reconnects",
            "Connections to the runtime after the first",
            self.reconnects.clone(),
        );
        r.register(
            "graft_nri_deadline_exceeded",
            "Requests refused because their handler missed graft-nri's deadline",
            self.deadline_exceeded.clone(),
        );
        r.register(
            "graft_nri_uninjected_found",
            "Running containers found at a Synchronize without their recorded devices",
            self.uninjected_found.clone(),
        );
    }

    /// Counts one answered request: its duration, and whether it missed the deadline.
    pub fn observe(&self, kind: RequestKind, elapsed: Duration, deadline_exceeded: bool) {
        let i = RequestKind::ALL
            .iter()
            .position(|k| *k == kind)
            .unwrap_or(5);
        if let Some(h) = self.by_kind.get(i) {
            h.observe(elapsed.as_secs_f64());
        }
        if deadline_exceeded {
            self.deadline_exceeded.inc();
        }
    }

    /// A container was created with its devices.
    pub fn injected(&self) {
        self.injected.inc();
    }

    /// A container was created unchanged: no graft claim in its pod.
    pub fn skipped(&self) {
        self.skipped.inc();
    }

    /// A container's requests to NVIDIA's container toolkit were cleared.
    pub fn gpu_requests_cleared(&self) {
        self.gpu_requests_cleared.inc();
    }

    /// A container was refused, for `why`.
    pub fn refused(&self, why: Refusal) {
        let i = Refusal::ALL.iter().position(|r| *r == why).unwrap_or(4);
        if let Some(c) = self.refused_by.get(i) {
            c.inc();
        }
    }

    /// A Synchronize found `n` running containers without their recorded devices.
    pub fn uninjected_found(&self, n: u64) {
        self.uninjected_found.inc_by(n);
    }

    /// A connection was configured; every one after the first counts as a reconnect.
    pub fn configured(&self) {
        if self.ever_configured.swap(true, Ordering::Relaxed) {
            self.reconnects.inc();
        }
        self.connected.set(1);
        self.synchronized.set(0);
    }

    /// The current connection's initial Synchronize is answered.
    pub fn synchronized(&self) {
        self.synchronized.set(1);
    }

    /// The connection to the runtime is lost.
    pub fn disconnected(&self) {
        self.connected.set(0);
        self.synchronized.set(0);
    }

    /// Connected and synchronized with the runtime.
    pub fn serving(&self) -> bool {
        self.connected.get() == 1 && self.synchronized.get() == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_is_there_from_the_start() {
        let m = NriMetrics::default();
        let mut r = Registry::default();
        m.register(&mut r);
        m.observe(RequestKind::CreateContainer, Duration::from_millis(3), true);
        m.refused(Refusal::DeviceAbsent);
        m.configured();
        m.configured();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        for want in [
            "graft_nri_request_duration_seconds_count{event=\"create_container\"} 1",
            "graft_nri_request_duration_seconds_count{event=\"synchronize\"} 0",
            "graft_nri_containers_refused_total{reason=\"device_absent\"} 1",
            "graft_nri_containers_refused_total{reason=\"record_unreadable\"} 0",
            "graft_nri_containers_injected_total 0",
            "graft_nri_containers_skipped_total 0",
            "graft_nri_deadline_exceeded_total 1",
            "graft_nri_reconnects_total 1",
            "graft_nri_connected 1",
            "graft_nri_synchronized 0",
            "graft_nri_uninjected_found_total 0",
        ] {
            assert!(text.contains(want), "{want} missing from\n{text}");
        }
    }
}
