//! Prepares under way and failed: `graft_driver_prepare_in_flight` and
//! `graft_driver_prepare_errors_total{reason}`, the reason from the error's type in a small
//! closed set ([`REASONS`]). Which error is which reason is decided in one place, beside
//! the call that counts them: `crate::edge::reasons`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The claim's opaque configuration (or what the record built from it would inject) is
/// refused: the claim's author fixes it.
pub const BAD_CONFIG: &str = "bad_config";
/// The claim, its allocation or an allocated device is not there (any more).
pub const NOT_FOUND: &str = "not_found";
/// The claim or its devices are held by other work (an earlier call, another claim).
pub const BUSY: &str = "busy";
/// The call's deadline passed first; the kubelet's retry gets the result.
pub const DEADLINE: &str = "deadline";
/// graft-nri is not in place to inject, so nothing is prepared.
pub const NRI_UNAVAILABLE: &str = "nri_unavailable";
/// A device's setup (VFIO, time-slicing, MIG, MPS) failed on the host.
pub const SETUP: &str = "setup";
/// The API server could not be read (the claim, its pods).
pub const API: &str = "api";
/// graft-driver's own state or threads failed.
pub const INTERNAL: &str = "internal";

/// Every `reason` label value.
pub const REASONS: [&str; 8] = [
    BAD_CONFIG,
    NOT_FOUND,
    BUSY,
    DEADLINE,
    NRI_UNAVAILABLE,
    SETUP,
    API,
    INTERNAL,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// The two prepare metrics, every reason's series made up front.
pub(super) struct PrepareCounts {
    in_flight: Gauge,
    errors: Family<ReasonLabel, Counter>,
}

impl Default for PrepareCounts {
    fn default() -> Self {
        let errors = Family::<ReasonLabel, Counter>::default();
        for reason in REASONS {
            let _ = errors.get_or_create(&ReasonLabel { reason });
        }
        PrepareCounts {
            in_flight: Gauge::default(),
            errors,
        }
    }
}

impl PrepareCounts {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "graft_driver_prepare_in_flight",
            "Claims whose prepare is under way (in a kubelet call, or past the call it outlasted)",
            self.in_flight.clone(),
        );
        r.register(
            "graft_driver_prepare_errors",
            "Claims whose prepare failed, by reason (bad_config, not_found, busy, deadline, nri_unavailable, setup, api, internal)",
            self.errors.clone(),
        );
    }

    pub(super) fn started(&self, claims: usize) -> InFlight {
        let n = claims as i64;
        self.in_flight.inc_by(n);
        InFlight {
            gauge: self.in_flight.clone(),
            n,
        }
    }

    pub(super) fn failed(&self, reason: &'static str, claims: usize) {
        debug_assert!(REASONS.contains(&reason), "{reason}");
        self.errors
            .get_or_create(&ReasonLabel { reason })
            .inc_by(claims as u64);
    }
}

/// Claims counted in `graft_driver_prepare_in_flight` until this is dropped.
#[must_use = "the claims are in flight only while the guard lives"]
pub struct InFlight {
    gauge: Gauge,
    n: i64,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.gauge.dec_by(self.n);
    }
}
