//! What an NVML event means for the GPU it happened on.
//!
//! XIDs are the driver's error reports. Most say the GPU itself is in trouble, but a few
//! are raised by what an application did (a bad address, a killed process) and leave the
//! GPU fine for the next pod: those are informational by default, the rest are fatal. The
//! operator can replace the informational list (`--health-informational-xids`).

use std::collections::BTreeSet;

use graft_driver_core::health::Condition;

/// XIDs that are informational unless the operator says otherwise, each with why.
pub const DEFAULT_INFORMATIONAL_XIDS: &[(u64, &str)] = &[
    (
        13,
        "graphics engine exception: almost always an application's out-of-range access",
    ),
    (
        31,
        "GPU memory page fault: an application's illegal address",
    ),
    (
        43,
        "GPU stopped processing: the faulting application's channel was reset, others go on",
    ),
    (
        45,
        "preemptive cleanup: the driver tore down a process that was killed or had failed",
    ),
    (
        68,
        "video processor exception: a decode stream's error, reported to its application",
    ),
    (
        94,
        "contained ECC error: only the application that touched the memory was stopped",
    ),
    (
        109,
        "context switch timeout: usually an application's kernel that would not yield",
    ),
];

/// The informational XIDs by default.
pub fn default_informational() -> BTreeSet<u64> {
    DEFAULT_INFORMATIONAL_XIDS.iter().map(|(x, _)| *x).collect()
}

/// A few XIDs named in messages, so that an operator reading an Event need not look them up.
fn xid_name(xid: u64) -> Option<&'static str> {
    Some(match xid {
        13 => "graphics engine exception",
        31 => "GPU memory page fault",
        43 => "GPU stopped processing",
        45 => "preemptive cleanup",
        48 => "double-bit ECC error",
        61 | 62 => "internal micro-controller error",
        63 => "ECC page retirement or row remapping event",
        64 => "ECC page retirement or row remapping failure",
        68 => "video processor exception",
        74 => "NVLink error",
        79 => "GPU has fallen off the bus",
        92 => "high single-bit ECC error rate",
        94 => "contained ECC error",
        95 => "uncontained ECC error",
        109 => "context switch timeout",
        119 | 120 => "GSP error",
        _ => return None,
    })
}

/// What NVML told us about one GPU (or one of its MIG instances).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// An XID error, with its number.
    Xid(u64),
    /// An uncorrectable (double-bit) ECC error.
    DoubleBitEcc,
    /// The GPU cannot be used (NVML's GPU-unavailable event).
    Unavailable,
    /// NVML's recommended recovery action: 0 none, 1 GPU reset, 2 node reboot, 3 drain
    /// peer-to-peer, 4 drain and reset.
    RecoveryAction(u64),
    /// NVML answers "GPU is lost" for it.
    Lost,
    /// NVML answers the probe's reads with another error.
    Unreachable,
    /// A row remapping waits for a GPU reset (NVML's remapped rows, Ampere and later).
    RowRemapPending,
    /// A row remapping failed (NVML's remapped rows): the memory cannot be repaired in place.
    RowRemapFailed,
    /// Pages wait to be retired at the next reboot (NVML's retired pages, before Ampere).
    PagesPendingRetirement,
}

/// Every health reason [`classify`] gives besides `xid-<n>`: the taint values, the Events'
/// reasons and the `kind` label of `graft_driver_health_events_total`.
pub const REASONS: [&str; 12] = [
    "ecc-double-bit",
    "gpu-unavailable",
    "gpu-lost",
    "nvml-error",
    "row-remap-pending",
    "row-remap-failure",
    "page-retirement-pending",
    "reset-required",
    "reboot-required",
    "drain-p2p",
    "drain-and-reset",
    "recovery-action",
];

/// A signal's meaning: a condition with its reason and message, or "healthy again".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The device is unhealthy or degraded.
    Condition {
        /// Which.
        condition: Condition,
        /// Short, for the taint value and the Event (e.g. `xid-79`).
        reason: String,
        /// One line for people.
        message: String,
    },
    /// The driver says nothing needs doing (recovery action "none").
    Recovered,
}

/// Classifies a signal with the given informational XIDs.
pub fn classify(signal: Signal, informational: &BTreeSet<u64>) -> Verdict {
    let fatal = |reason: String, message: String| Verdict::Condition {
        condition: Condition::Unhealthy,
        reason,
        message,
    };
    match signal {
        Signal::Xid(x) => {
            let what = xid_name(x).map(|n| format!(" ({n})")).unwrap_or_default();
            let condition = if informational.contains(&x) {
                Condition::Degraded
            } else {
                Condition::Unhealthy
            };
            Verdict::Condition {
                condition,
                reason: format!("xid-{x}"),
                message: format!("XID {x}{what}"),
            }
        }
        Signal::DoubleBitEcc => fatal(
            "ecc-double-bit".into(),
            "double-bit ECC error: memory contents were lost".into(),
        ),
        Signal::Unavailable => fatal(
            "gpu-unavailable".into(),
            "NVML reports the GPU unavailable".into(),
        ),
        Signal::Lost => fatal(
            "gpu-lost".into(),
            "NVML reports the GPU lost (fallen off the bus or otherwise inaccessible)".into(),
        ),
        Signal::Unreachable => fatal(
            "nvml-error".into(),
            "NVML cannot read the GPU (graft-driver's log has the error)".into(),
        ),
        Signal::RowRemapPending => fatal(
            "row-remap-pending".into(),
            "a memory row remapping is pending: it takes effect at the next GPU reset".into(),
        ),
        Signal::RowRemapFailed => fatal(
            "row-remap-failure".into(),
            "a memory row remapping failed: the GPU's memory cannot be repaired in place".into(),
        ),
        Signal::PagesPendingRetirement => fatal(
            "page-retirement-pending".into(),
            "memory pages are pending retirement: they are retired at the next reboot".into(),
        ),
        Signal::RecoveryAction(0) => Verdict::Recovered,
        Signal::RecoveryAction(a) => {
            let (reason, what) = match a {
                1 => ("reset-required", "a GPU reset"),
                2 => ("reboot-required", "a node reboot"),
                3 => ("drain-p2p", "draining peer-to-peer traffic"),
                4 => ("drain-and-reset", "draining the GPU, then a reset"),
                _ => ("recovery-action", "an action graft does not know"),
            };
            fatal(
                reason.into(),
                format!("the NVIDIA driver asks for {what} (recovery action {a})"),
            )
        }
    }
}

/// An item of an operator's XID list that is not a number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{item:?} is not an XID number")]
pub struct NotAnXid {
    /// The item as written.
    pub item: String,
    /// The parser's error.
    #[source]
    pub source: std::num::ParseIntError,
}

/// Parses an operator's XID list: numbers separated by commas or spaces; empty means none.
pub fn parse_xids(text: &str) -> Result<BTreeSet<u64>, NotAnXid> {
    text.split([',', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u64>().map_err(|source| NotAnXid {
                item: s.to_string(),
                source,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_lists_every_reason_but_xids() {
        let mut signals = vec![
            Signal::DoubleBitEcc,
            Signal::Unavailable,
            Signal::Lost,
            Signal::Unreachable,
            Signal::RowRemapPending,
            Signal::RowRemapFailed,
            Signal::PagesPendingRetirement,
        ];
        signals.extend((1..=5).map(Signal::RecoveryAction));
        let mut given: Vec<String> = signals
            .into_iter()
            .filter_map(|s| match classify(s, &BTreeSet::new()) {
                Verdict::Condition { reason, .. } => Some(reason),
                Verdict::Recovered => None,
            })
            .collect();
        given.sort();
        let mut listed: Vec<String> = REASONS.iter().map(|r| r.to_string()).collect();
        listed.sort();
        assert_eq!(given, listed);
    }

    #[test]
    fn defaults_split_application_errors_from_gpu_faults() {
        let info = default_informational();
        for x in [13, 31, 43, 45, 68, 94, 109] {
            assert!(matches!(
                classify(Signal::Xid(x), &info),
                Verdict::Condition {
                    condition: Condition::Degraded,
                    ..
                }
            ));
        }
        for x in [48, 62, 63, 64, 74, 79, 92, 95, 119, 120, 999] {
            assert!(matches!(
                classify(Signal::Xid(x), &info),
                Verdict::Condition {
                    condition: Condition::Unhealthy,
                    ..
                }
            ));
        }
        let Verdict::Condition {
            reason, message, ..
        } = classify(Signal::Xid(79), &info)
        else {
            panic!()
        };
        assert_eq!(reason, "xid-79");
        assert_eq!(message, "XID 79 (GPU has fallen off the bus)");
    }

    #[test]
    fn the_operator_list_replaces_the_default() {
        let info = parse_xids("79, 13").unwrap();
        assert!(matches!(
            classify(Signal::Xid(79), &info),
            Verdict::Condition {
                condition: Condition::Degraded,
                ..
            }
        ));
        assert!(matches!(
            classify(Signal::Xid(31), &info),
            Verdict::Condition {
                condition: Condition::Unhealthy,
                ..
            }
        ));
        assert_eq!(parse_xids("").unwrap(), BTreeSet::new());
        assert!(parse_xids("13,x")
            .unwrap_err()
            .to_string()
            .contains("\"x\""));
    }

    #[test]
    fn recovery_actions() {
        let info = default_informational();
        assert_eq!(
            classify(Signal::RecoveryAction(0), &info),
            Verdict::Recovered
        );
        let Verdict::Condition { reason, .. } = classify(Signal::RecoveryAction(1), &info) else {
            panic!()
        };
        assert_eq!(reason, "reset-required");
        for (signal, want) in [
            (Signal::Lost, "gpu-lost"),
            (Signal::Unreachable, "nvml-error"),
            (Signal::RowRemapPending, "row-remap-pending"),
            (Signal::RowRemapFailed, "row-remap-failure"),
            (Signal::PagesPendingRetirement, "page-retirement-pending"),
        ] {
            assert!(matches!(
                classify(signal, &info),
                Verdict::Condition {
                    condition: Condition::Unhealthy,
                    reason,
                    ..
                } if reason == want
            ));
        }
    }
}
