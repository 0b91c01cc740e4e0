//! The same stream replayed without a cluster: an ideal scheduler that sees every free GPU at
//! once, places a pod the moment it fits and never backs off, choosing nodes by one rule.
//! It bounds what node choice alone can do for this stream: the real variants pay the
//! scheduler's queueing and backoff on top, which no score changes.
//!
//! Whole GPUs only (the MIG pods use GPUs that whole-GPU pods cannot), on the bench's nodes
//! and NVLink islands. A pod takes the first free GPUs in index order, as the allocator walks
//! them. Pods are tried in arrival order every tick, and a pod that does not fit lets later
//! ones past it, as kube-scheduler does.

use std::time::Duration;

use graft_scheduler_extender::demand::Demand;
use graft_scheduler_extender::score::{score, Mode};
use graft_scheduler_extender::state::{Gpu, NodeGpus};

use super::stream::{Ask, Job};

/// How the ideal scheduler picks among the nodes a pod fits on.
#[derive(Clone, Copy)]
pub enum Rule {
    /// The node with the largest share of its GPUs free: what kube-scheduler's default
    /// scoring (least allocated, by pod requests) does with pods of equal requests.
    Spread,
    /// The node left with the fewest free GPUs.
    Pack,
    /// graft-scheduler-extender's score (packing and NVLink island fit), ties spread.
    Extender,
    /// The extender's score, and a pod keeps off the node nearest to fitting the biggest
    /// bigger pod waiting, unless no other node fits it: what an extender `filter` that knew
    /// the pending pods could add.
    Reserve,
}

pub struct Replay {
    pub stranded: usize,
    pub mean: Duration,
    pub small_mean: Duration,
    /// Multi-GPU pods whose GPUs share one island, of all multi-GPU pods.
    pub island: (usize, usize),
}

/// The bench's nodes: three of 8 GPUs on islands 0-3 and 4-7, and one whose GPUs 4 and 5
/// are in MIG mode, leaving 0-3 and 6-7.
pub fn bench_nodes() -> Vec<NodeGpus> {
    let node = |islands: &[(&str, &[usize])]| NodeGpus {
        gpus: islands
            .iter()
            .flat_map(|(island, idx)| {
                idx.iter().map(|i| Gpu {
                    name: format!("gpu-{i}"),
                    island: Some(island.to_string()),
                    used: false,
                })
            })
            .collect(),
    };
    let full: &[(&str, &[usize])] = &[("a", &[0, 1, 2, 3]), ("b", &[4, 5, 6, 7])];
    let mig: &[(&str, &[usize])] = &[("a", &[0, 1, 2, 3]), ("b", &[6, 7])];
    vec![node(full), node(full), node(full), node(mig)]
}

fn gpus(j: &Job) -> usize {
    match j.ask {
        Ask::Gpus(n) => n as usize,
        Ask::Mig(_) => 0,
    }
}

/// The share of a node's GPUs that is free, in 1/64ths.
fn spread_key(n: &NodeGpus) -> usize {
    n.free() * 64 / n.gpus.len().max(1)
}

/// The node a pod of `n` GPUs should leave alone: of the nodes big enough for the biggest
/// waiting pod bigger than `n`, the one with the most free GPUs.
fn reserved(waiting: &[usize], n: usize, nodes: &[NodeGpus]) -> Option<usize> {
    let big = waiting.iter().copied().filter(|&w| w > n).max()?;
    (0..nodes.len())
        .filter(|&k| nodes[k].gpus.len() >= big)
        .max_by_key(|&k| (nodes[k].free(), std::cmp::Reverse(k)))
}

fn choose(rule: Rule, nodes: &[NodeGpus], n: usize, waiting: &[usize]) -> Option<usize> {
    let fits: Vec<usize> = (0..nodes.len()).filter(|&k| nodes[k].free() >= n).collect();
    let want = Demand {
        gpus: n,
        one_island: 0,
        unknown_claims: 0,
    };
    let extender = |k: usize| score(&nodes[k], &want, Mode::Pack);
    // Ties to the lower index, as a fixed order would; the extender's ties to spreading.
    match rule {
        Rule::Spread => fits
            .into_iter()
            .max_by_key(|&k| (spread_key(&nodes[k]), std::cmp::Reverse(k))),
        Rule::Pack => fits.into_iter().min_by_key(|&k| (nodes[k].free() - n, k)),
        Rule::Extender => fits
            .into_iter()
            .max_by_key(|&k| (extender(k), spread_key(&nodes[k]), std::cmp::Reverse(k))),
        Rule::Reserve => {
            let keep_off = reserved(waiting, n, nodes);
            let others = fits.iter().any(|&k| Some(k) != keep_off);
            fits.into_iter()
                .filter(|&k| Some(k) != keep_off || !others)
                .max_by_key(|&k| (extender(k), spread_key(&nodes[k]), std::cmp::Reverse(k)))
        }
    }
}

/// Replays `jobs` on `nodes` with the bench's tick and stranded rule. A pod holds its GPUs
/// for its run and `hold` more: what a cluster adds (start, the finish being seen, unprepare).
pub fn replay(
    jobs: &[Job],
    mut nodes: Vec<NodeGpus>,
    rule: Rule,
    hold: Duration,
    tick: Duration,
    stranded: Duration,
) -> Replay {
    // (end, node, GPU indices in the node)
    let mut running: Vec<(Duration, usize, Vec<usize>)> = Vec::new();
    let mut pending: Vec<usize> = Vec::new();
    let mut waited = vec![None; jobs.len()];
    let mut strand = vec![Duration::ZERO; jobs.len()];
    let mut island = (0, 0);
    let (mut t, mut next) = (Duration::ZERO, 0);
    while next < jobs.len() || !pending.is_empty() || !running.is_empty() {
        while next < jobs.len() && jobs[next].arrive <= t {
            if gpus(&jobs[next]) > 0 {
                pending.push(next);
            }
            next += 1;
        }
        running.retain(|(end, node, held)| {
            let done = *end <= t;
            if done {
                for &g in held {
                    nodes[*node].gpus[g].used = false;
                }
            }
            !done
        });
        let waiting: Vec<usize> = pending.iter().map(|&i| gpus(&jobs[i])).collect();
        pending.retain(|&i| {
            let n = gpus(&jobs[i]);
            let Some(k) = choose(rule, &nodes, n, &waiting) else {
                return true;
            };
            let held: Vec<usize> = (0..nodes[k].gpus.len())
                .filter(|&g| !nodes[k].gpus[g].used)
                .take(n)
                .collect();
            for &g in &held {
                nodes[k].gpus[g].used = true;
            }
            if n > 1 {
                let first = &nodes[k].gpus[held[0]].island;
                island.1 += 1;
                if held.iter().all(|&g| nodes[k].gpus[g].island == *first) {
                    island.0 += 1;
                }
            }
            running.push((t + jobs[i].run + hold, k, held));
            waited[i] = Some(t.saturating_sub(jobs[i].arrive));
            false
        });
        let total: usize = nodes.iter().map(NodeGpus::free).sum();
        for &i in &pending {
            if total >= gpus(&jobs[i]) {
                strand[i] += tick;
            }
        }
        t += tick;
    }
    let mean = |f: &dyn Fn(&Job) -> bool| {
        let w: Vec<Duration> = jobs
            .iter()
            .zip(&waited)
            .filter(|(j, _)| f(j))
            .filter_map(|(_, w)| *w)
            .collect();
        w.iter().sum::<Duration>() / w.len().max(1) as u32
    };
    Replay {
        stranded: strand.iter().filter(|&&s| s >= stranded).count(),
        mean: mean(&|j| gpus(j) > 0),
        small_mean: mean(&|j| gpus(j) == 1),
        island,
    }
}

/// The ideal replay's table on `nodes`, and the stream's whole-GPU demand over the arrival
/// span; GRAFT_BENCH_HOLD_MS holds each pod's GPUs that much past its run.
pub fn print(jobs: &[Job], nodes: Vec<NodeGpus>) {
    let whole: usize = nodes.iter().map(|n| n.gpus.len()).sum();
    let gpu_secs: f64 = jobs
        .iter()
        .filter_map(|j| match j.ask {
            Ask::Gpus(n) => Some(f64::from(n) * j.run.as_secs_f64()),
            Ask::Mig(_) => None,
        })
        .sum();
    let span = jobs.last().map_or(1.0, |j| j.arrive.as_secs_f64().max(1.0));
    let hold = Duration::from_millis(super::stream::env_or("GRAFT_BENCH_HOLD_MS", 0));
    println!(
        "\nideal replay, no cluster (whole-GPU demand {:.2} of the {whole} GPUs while pods arrive; GPUs held {:.1} s past each run)\n",
        gpu_secs / span / whole.max(1) as f64,
        hold.as_secs_f64()
    );
    println!("| rule | stranded-capacity waits | whole-GPU pods pending mean s | 1-GPU pods pending mean s | multi-GPU pods on one NVLink island |");
    println!("|---|---|---|---|---|");
    for (name, rule) in [
        ("spread", Rule::Spread),
        ("pack", Rule::Pack),
        ("extender's score", Rule::Extender),
        (
            "extender's score, reserving for the biggest waiting pod",
            Rule::Reserve,
        ),
    ] {
        let r = replay(
            jobs,
            nodes.clone(),
            rule,
            hold,
            super::seen::TICK,
            super::seen::STRANDED,
        );
        println!(
            "| {name} | {} | {:.1} | {:.1} | {} of {} |",
            r.stranded,
            r.mean.as_secs_f64(),
            r.small_mean.as_secs_f64(),
            r.island.0,
            r.island.1
        );
    }
}
