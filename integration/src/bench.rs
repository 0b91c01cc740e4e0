//! What the benchmarks share: percentiles of sorted timings, a process's memory and CPU, and
//! the claims they record on the node; paired statistics over rounds, per-call sample files,
//! run-queue wait and containerd's own timings by uprobe in the submodules.

pub mod mem;
pub mod paired;
pub mod samples;
pub mod sched;
pub mod slow_disk;
pub mod uprobe;

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

/// The ratio of the medians of `b` over `a`, with a 95 % bootstrap interval (2000
/// resamples of each side, a fixed seed so that a rerun on the same figures agrees).
pub fn median_ratio(a: &[Duration], b: &[Duration]) -> (f64, f64, f64) {
    fn median(xs: &mut [f64]) -> f64 {
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    }
    let secs = |v: &[Duration]| v.iter().map(Duration::as_secs_f64).collect::<Vec<_>>();
    let (a, b) = (secs(a), secs(b));
    let ratio = median(&mut b.clone()) / median(&mut a.clone());
    // xorshift64: enough to pick indices, and no dependency.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut ratios: Vec<f64> = (0..2000)
        .map(|_| {
            let mut ra: Vec<f64> = (0..a.len()).map(|_| a[next(a.len())]).collect();
            let mut rb: Vec<f64> = (0..b.len()).map(|_| b[next(b.len())]).collect();
            median(&mut rb) / median(&mut ra)
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    (ratio, ratios[50], ratios[1949])
}
