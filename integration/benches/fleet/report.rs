//! The fleet benchmark's figures and how they are printed (Markdown, for
//! docs/benchmarks.md).

use std::time::Duration;

use graft_integration::fleet::audit::Counts;
use graft_integration::fleet::domains::DomainRun;

/// One pair of rounds on the same pods: pods bound per second without and with the
/// extender.
pub struct Pair {
    pub without: f64,
    pub with: f64,
}

/// What one fleet size measured.
pub struct Figures {
    pub size: usize,
    pub slices: usize,
    pub made_in: Duration,
    pub pods: usize,
    pub pairs: Vec<Pair>,
    /// (VmRSS, VmHWM) KiB.
    pub ext_idle: (u64, u64),
    pub ext_after: (u64, u64),
    pub ctl_idle: (u64, u64),
    pub ctl_after: (u64, u64),
    /// An earlier controller build beside (GRAFT_FLEET_CTL_PEER): idle and after.
    pub peer: Option<((u64, u64), (u64, u64))>,
    pub ext_cpu: Duration,
    pub ext_calls: f64,
    pub ext_call_s: f64,
    /// Claims made at rest, and the RSS each added (bytes: extender, controller).
    pub claims: usize,
    pub per_claim: (f64, f64),
    pub idle: Counts,
    pub idle_s: f64,
    pub busy: Counts,
    pub busy_s: f64,
    /// ComputeDomains made Ready, in order.
    pub domains: Vec<DomainRun>,
}

/// Student's t at 97.5 % for `df` degrees of freedom (1 to 10; the normal's beyond).
fn t975(df: usize) -> f64 {
    const T: [f64; 10] = [12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23];
    T.get(df.wrapping_sub(1)).copied().unwrap_or(1.96)
}

/// Mean and half-width of the 95 % interval of `xs`.
pub fn interval(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n.max(1.0);
    if xs.len() < 2 {
        return (mean, f64::NAN);
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, t975(xs.len() - 1) * (var / n).sqrt())
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

pub fn print(f: &Figures) {
    println!(
        "\n### {} simulated nodes ({} slices, made in {:.0} s)\n",
        f.size,
        f.slices,
        f.made_in.as_secs_f64()
    );
    println!("| pair | without extender (pods/s) | with extender (pods/s) | ratio |");
    println!("|---|---|---|---|");
    for (i, p) in f.pairs.iter().enumerate() {
        println!(
            "| {i} | {:.1} | {:.1} | {:.2} |",
            p.without,
            p.with,
            p.with / p.without
        );
    }
    let ratios: Vec<f64> = f.pairs.iter().map(|p| p.with / p.without).collect();
    let (m, h) = interval(&ratios);
    println!(
        "\nThroughput with the extender / without: **{m:.2} ± {h:.2}** (95 %, {} pairs of {} pods).",
        ratios.len(),
        f.pods
    );
    println!(
        "Extender: {:.0} calls, {:.2} ms per call, {:.1} s CPU over the rounds.",
        f.ext_calls,
        1000.0 * f.ext_call_s / f.ext_calls.max(1.0),
        f.ext_cpu.as_secs_f64()
    );
    println!(
        "Memory (MiB, RSS idle / RSS after the rounds / peak): extender {:.1} / {:.1} / {:.1}; controller {:.1} / {:.1} / {:.1}.",
        mib(f.ext_idle.0),
        mib(f.ext_after.0),
        mib(f.ext_after.1),
        mib(f.ctl_idle.0),
        mib(f.ctl_after.0),
        mib(f.ctl_after.1)
    );
    if let Some((idle, after)) = f.peer {
        println!(
            "Earlier controller build beside it (GRAFT_FLEET_CTL_PEER): {:.1} / {:.1} / {:.1} MiB.",
            mib(idle.0),
            mib(after.0),
            mib(after.1)
        );
    }
    println!(
        "{} unallocated claims at rest: {:.0} B each in the extender, {:.0} B in the controller (RSS).",
        f.claims, f.per_claim.0, f.per_claim.1
    );
    println!("\n| caller | idle: requests/s | idle: watches opened | rounds: requests/s |");
    println!("|---|---|---|---|");
    let mut callers: Vec<&String> = f.idle.by.keys().chain(f.busy.by.keys()).collect();
    callers.sort();
    callers.dedup();
    for c in callers {
        println!(
            "| {c} | {:.2} | {} | {:.2} |",
            f.idle.requests(c) as f64 / f.idle_s,
            f.idle.watches(c),
            f.busy.requests(c) as f64 / f.busy_s
        );
    }
    if !f.domains.is_empty() {
        println!(
            "\n| ComputeDomain nodes | pods select the clique | placed (s) | pods made (s) | Ready after the first pod (s) | all bound (s) |"
        );
        println!("|---|---|---|---|---|---|");
        for d in &f.domains {
            println!(
                "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
                d.nodes,
                if d.pinned { "yes" } else { "no" },
                d.placed_in.as_secs_f64(),
                d.created_in.as_secs_f64(),
                d.ready_in.as_secs_f64(),
                d.bound_in.as_secs_f64()
            );
        }
    }
    println!(
        "One graft-driver: {:.4} requests/s idle ({} watches opened over {:.0} s), {:.4} during the rounds.",
        f.idle.requests("graft-driver") as f64 / f.idle_s,
        f.idle.watches("graft-driver"),
        f.idle_s,
        f.busy.requests("graft-driver") as f64 / f.busy_s
    );
}

/// Memory at the largest size against the smallest.
pub fn summary(all: &[Figures]) {
    let (Some(a), Some(b)) = (all.first(), all.last()) else {
        return;
    };
    if a.size == b.size {
        return;
    }
    println!(
        "\nResident memory at {} nodes over {} (after the rounds): extender {:.2}x, controller {:.2}x.",
        b.size,
        a.size,
        b.ext_after.0 as f64 / a.ext_after.0.max(1) as f64,
        b.ctl_after.0 as f64 / a.ctl_after.0.max(1) as f64
    );
    for c in [
        "graft-scheduler-extender",
        "graft-compute-domain-controller",
    ] {
        println!(
            "{c}: {:.3} requests/s idle at {} nodes, {:.3} at {}.",
            a.idle.requests(c) as f64 / a.idle_s,
            a.size,
            b.idle.requests(c) as f64 / b.idle_s,
            b.size
        );
    }
}
