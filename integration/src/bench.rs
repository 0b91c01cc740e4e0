//! What the NRI benchmarks share: percentiles of sorted timings, a process's memory, and
//! the claims they record on the node.

use std::time::Duration;

use graft_record::{ClaimRecord, ContainerEdits};

use crate::records::one_device_claim;

/// The `p` quantile (0..=1) of `sorted`, nearest rank.
pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// `(VmRSS, VmHWM)` of `pid` in KiB (0 when unreadable).
pub fn rss_kib(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let get = |k: &str| {
        text.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (get("VmRSS:"), get("VmHWM:"))
}

/// Claim number `i`, one device (`dev-0`) with `edits`, held by `containers` of the pod.
pub fn numbered_claim(
    i: usize,
    pod_uid: &str,
    containers: &[String],
    edits: ContainerEdits,
) -> ClaimRecord {
    let names: Vec<&str> = containers.iter().map(String::as_str).collect();
    one_device_claim(
        &format!("claim-{i:05}"),
        &format!("claim-{i}"),
        pod_uid,
        &names,
        "dev-0",
        edits,
    )
}
