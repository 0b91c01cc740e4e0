//! The extender's metrics (`graft_scheduler_extender_*`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

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
}

impl Metrics {
    /// New metrics, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Metrics {
            calls: Family::default(),
            duration: Histogram::new(graft_telemetry::request_buckets()),
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
