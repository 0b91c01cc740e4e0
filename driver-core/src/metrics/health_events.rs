//! `graft_driver_health_events_total`'s labels: a device's health reason as a bounded
//! pair, so the series stay a closed set whatever a health monitor reports.

use prometheus_client::encoding::EncodeLabelSet;

/// The labels of one health event: its kind and, for `xid-<n>`, the number.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct EventLabels {
    pub(super) kind: &'static str,
    pub(super) xid: String,
}

/// A health reason as bounded labels: `xid-79` -> (xid, 79); the families' `reasons` as
/// themselves; anything else `other`.
pub(super) fn event_labels(reason: &str, reasons: &[&'static str]) -> EventLabels {
    if let Some(n) = reason.strip_prefix("xid-") {
        let xid = if !n.is_empty() && n.len() <= 4 && n.bytes().all(|b| b.is_ascii_digit()) {
            n.to_string()
        } else {
            "other".into()
        };
        return EventLabels { kind: "xid", xid };
    }
    let kind = reasons
        .iter()
        .find(|r| **r == reason)
        .copied()
        .unwrap_or("other");
    EventLabels {
        kind,
        xid: String::new(),
    }
}
