//! What the benchmarks share: percentiles of sorted timings, a process's memory and CPU, and
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

/// The newest process named exactly `name` on this machine.
pub fn pid_of(name: &str) -> Option<u32> {
    let out = std::process::Command::new("pgrep")
        .args(["-n", "-x", name])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// CPU time `pid` has used so far, user and system (0 when unreadable).
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces:
    // utime and stime are the 14th and 15th of the line, 12th and 13th after it.
    let ticks: u64 = stat
        .rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|v| v.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|&h| h > 0)
        .unwrap_or(100) as u64;
    Duration::from_nanos(ticks.saturating_mul(1_000_000_000) / hz)
}
