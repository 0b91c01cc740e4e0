//! The bench's figures, from per-round samples: every statistic is taken over rounds and its
//! 95 % interval resamples whole rounds, so each side's samples stay paired with the others'
//! taken in the same round.

use graft_integration::bench::paired::{bootstrap, differences, quantile, quantile_of, Estimate};

/// The sides, in the order of the arrays below.
pub const LABELS: [&str; SIDES] = [
    "none",
    "graft-null-nri",
    "graft-nri",
    "device-injector",
    "graft-null-nri-via-ttrpc",
];
pub const SIDES: usize = 5;
pub const NONE: usize = 0;
pub const NULL: usize = 1;
pub const GRAFT: usize = 2;
pub const INJECTOR: usize = 3;
/// graft-null-nri with CreateContainer through ttrpc's tasks, not the SDK's inline path.
pub const NULL_TTRPC: usize = 4;

/// One measured round: every side created one container. Times in microseconds.
#[derive(Debug, Clone)]
pub struct Round {
    /// The round created the first container of each side's pod.
    pub first: bool,
    /// CRI CreateContainer as the client saw it.
    pub took: [f64; SIDES],
    /// Run-queue wait of containerd's and the plugin's threads during the call.
    pub waited: [f64; SIDES],
    /// containerd's wait for the plugin's answer (uprobes); NaN for `none`.
    pub turnaround: [f64; SIDES],
}

fn series(rounds: &[&Round], f: impl Fn(&Round) -> f64) -> Vec<f64> {
    rounds.iter().map(|r| f(r)).collect()
}

fn q(series: &[f64], p: f64) -> Estimate {
    bootstrap(series.len(), |idx| quantile_of(series, idx, p))
}

/// The ratio of the `p` quantiles of `a` and `b`, paired by round.
fn ratio(a: &[f64], b: &[f64], p: f64) -> Estimate {
    bootstrap(a.len(), |idx| {
        quantile_of(a, idx, p) / quantile_of(b, idx, p)
    })
}

/// Prints one case (a subset of the rounds) as markdown; `tail` picks the high quantile
/// (p99 needs a few hundred rounds; a small case reports p90).
pub fn case(title: &str, rounds: &[&Round], tail: f64) {
    let n = rounds.len();
    let t = (tail * 100.0).round();
    println!("\n### {title}: {n} rounds\n");
    if n < 10 {
        println!("too few rounds for an interval");
        return;
    }
    let took: Vec<Vec<f64>> = (0..SIDES).map(|s| series(rounds, |r| r.took[s])).collect();
    let over: Vec<Vec<f64>> = (0..SIDES)
        .map(|s| differences(&took[s], &took[NONE]))
        .collect();
    println!("CRI CreateContainer, µs, as the client sees it. Overhead at p50: the median of each round's create minus the same round's on `none`; at p{t}: the side's p{t} minus `none`'s, both resampled by round:\n");
    println!("| side | p50 | p{t} | overhead p50 | overhead p{t} |");
    println!("|---|---|---|---|---|");
    for s in 0..SIDES {
        let tail_over = bootstrap(n, |idx| {
            quantile_of(&took[s], idx, tail) - quantile_of(&took[NONE], idx, tail)
        });
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            LABELS[s],
            q(&took[s], 0.5),
            q(&took[s], tail),
            q(&over[s], 0.5),
            tail_over
        );
    }
    println!(
        "\nratio of the overheads at p50, graft-nri / device-injector: {:.2}; graft-null-nri / device-injector: {:.2}",
        ratio(&over[GRAFT], &over[INJECTOR], 0.5),
        ratio(&over[NULL], &over[INJECTOR], 0.5)
    );
    // The tail goal compares graft-nri's p99 overhead with device-injector's: both are over
    // the same `none`, so it is the sign of the difference of their p99s, paired by round.
    let tail_diff = bootstrap(n, |idx| {
        quantile_of(&took[GRAFT], idx, tail) - quantile_of(&took[INJECTOR], idx, tail)
    });
    println!(
        "graft-nri's p{t} overhead minus device-injector's (their p{t}s' difference): {tail_diff:.0} µs; graft-nri's p{t} / device-injector's: {:.2}",
        ratio(&took[GRAFT], &took[INJECTOR], tail)
    );
    // What the slowest calls waited for: the run-queue wait of containerd's and the
    // plugin's threads during the call, summed over threads (so it can exceed the call).
    // Where the tail's wait grows by as much as its create, the run queue accounts for it.
    println!("\nrun-queue wait during a call, µs, median over all calls / over the calls at or above the side's p{t}; and how much longer those calls took and waited than the medians:");
    for s in 0..SIDES {
        let cut = q(&took[s], tail).value;
        let mut all = series(rounds, |r| r.waited[s]);
        let slow: Vec<&&Round> = rounds.iter().filter(|r| r.took[s] >= cut).collect();
        let mut slow_wait: Vec<f64> = slow.iter().map(|r| r.waited[s]).collect();
        let mut slow_took: Vec<f64> = slow.iter().map(|r| r.took[s]).collect();
        let mut all_took = took[s].clone();
        let wait = (quantile(&mut all, 0.5), quantile(&mut slow_wait, 0.5));
        let create = (quantile(&mut all_took, 0.5), quantile(&mut slow_took, 0.5));
        println!(
            "- {}: {:.0} / {:.0} ({} calls); create +{:.0}, wait {:+.0}",
            LABELS[s],
            wait.0,
            wait.1,
            slow.len(),
            create.1 - create.0,
            wait.1 - wait.0
        );
    }
    let turn: Vec<Vec<f64>> = (0..SIDES)
        .map(|s| series(rounds, |r| r.turnaround[s]))
        .collect();
    if turn[GRAFT].iter().any(|x| x.is_nan()) {
        println!("\n(no turnaround: uprobes were not available)");
        return;
    }
    println!("\nTurnaround inside containerd, µs: from entering `(*plugin).createContainer` to entering `(*result).apply` with the plugin's answer (uprobes):\n");
    println!("| plugin | p50 | p{t} |");
    println!("|---|---|---|");
    for s in [NULL, NULL_TTRPC, GRAFT, INJECTOR] {
        println!(
            "| {} | {:.0} | {:.0} |",
            LABELS[s],
            q(&turn[s], 0.5),
            q(&turn[s], tail)
        );
    }
    println!(
        "\nturnaround ratio graft-nri / graft-null-nri: p50 {:.2}, p{t} {:.2}; graft-nri / device-injector: p50 {:.2}, p{t} {:.2}",
        ratio(&turn[GRAFT], &turn[NULL], 0.5),
        ratio(&turn[GRAFT], &turn[NULL], tail),
        ratio(&turn[GRAFT], &turn[INJECTOR], 0.5),
        ratio(&turn[GRAFT], &turn[INJECTOR], tail)
    );
    println!(
        "\nthe SDK's inline path against ttrpc's tasks, graft-null-nri / graft-null-nri-via-ttrpc: p50 {:.2}, p{t} {:.2}; graft-null-nri / device-injector: p50 {:.2}, p{t} {:.2}",
        ratio(&turn[NULL], &turn[NULL_TTRPC], 0.5),
        ratio(&turn[NULL], &turn[NULL_TTRPC], tail),
        ratio(&turn[NULL], &turn[INJECTOR], 0.5),
        ratio(&turn[NULL], &turn[INJECTOR], tail)
    );
}

/// The rounds of a samples file this bench wrote, to report it again (GRAFT_BENCH_FROM).
pub fn read_samples(path: &std::path::Path) -> anyhow::Result<Vec<Round>> {
    use anyhow::Context;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut rounds: Vec<Round> = Vec::new();
    for (n, line) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let bad = || format!("{}:{}: {line:?}", path.display(), n + 1);
        let [round, first, side, _order, took, waited, turn] = f[..] else {
            anyhow::bail!("{}: expected 7 fields", bad());
        };
        let r: usize = round.parse().with_context(bad)?;
        let s = LABELS
            .iter()
            .position(|l| *l == side)
            .with_context(|| format!("{}: unknown side", bad()))?;
        while rounds.len() <= r {
            rounds.push(Round {
                first: false,
                took: [f64::NAN; SIDES],
                waited: [f64::NAN; SIDES],
                turnaround: [f64::NAN; SIDES],
            });
        }
        let round = &mut rounds[r];
        round.first = first == "true";
        round.took[s] = took.parse().with_context(bad)?;
        round.waited[s] = waited.parse().with_context(bad)?;
        round.turnaround[s] = turn.parse().with_context(bad)?;
    }
    Ok(rounds)
}
