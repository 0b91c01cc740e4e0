//! What one pod of a churn stream went through, and the figures of a run: shared by the
//! placement bench (four testbed nodes) and the fleet churn bench (simulated nodes).

use std::time::{Duration, Instant};

use k8s_openapi::api::resource::v1::ResourceClaim;

use super::stream::{Ask, Job};

/// A wait this long, in all, with enough free GPUs in the cluster counts as stranded.
pub const STRANDED: Duration = Duration::from_secs(3);
/// How often the cluster is looked at.
pub const TICK: Duration = Duration::from_millis(500);

#[derive(Default)]
pub struct Seen {
    pub created: Option<Instant>,
    pub scheduled: Option<Instant>,
    pub finished: Option<Instant>,
    pub stranded: Duration,
    /// Of `stranded`, the ticks when no single node had room either.
    pub fragmented: Duration,
    pub one_island: Option<bool>,
}

impl Seen {
    /// One tick while the cluster has `free` whole GPUs free, `most` of them on one node:
    /// a whole-GPU pod still waiting that would fit the total waits stranded.
    pub fn tick(&mut self, ask: Ask, free: usize, most: usize) {
        if let (Ask::Gpus(n), None) = (ask, self.scheduled) {
            if free >= n as usize {
                self.stranded += TICK;
                if most < n as usize {
                    self.fragmented += TICK;
                }
            }
        }
    }
}

pub struct Figures {
    pub stranded: usize,
    pub fragmented: usize,
    pub mean: Duration,
    pub p99: Duration,
    pub small_mean: Duration,
    pub utilisation: f64,
    pub island: (usize, usize),
}

pub fn figures(jobs: &[Job], seen: &[Seen], whole_gpus: u32) -> Figures {
    let pending = |s: &Seen| {
        s.scheduled
            .zip(s.created)
            .map(|(a, b)| a - b)
            .unwrap_or_default()
    };
    let mut all: Vec<Duration> = seen.iter().map(pending).collect();
    all.sort();
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / v.len().max(1) as u32;
    let small: Vec<Duration> = jobs
        .iter()
        .zip(seen)
        .filter(|(j, _)| matches!(j.ask, Ask::Gpus(1) | Ask::Mig(_)))
        .map(|(_, s)| pending(s))
        .collect();
    let first = seen.iter().filter_map(|s| s.created).min();
    let last = seen.iter().filter_map(|s| s.finished).max();
    let span = first.zip(last).map(|(a, b)| b - a).unwrap_or_default();
    let used: f64 = jobs
        .iter()
        .zip(seen)
        .filter_map(|(j, s)| match j.ask {
            Ask::Gpus(n) => Some(
                f64::from(n)
                    * s.finished
                        .zip(s.scheduled)
                        .map(|(f, b)| (f - b).as_secs_f64())?,
            ),
            Ask::Mig(_) => None,
        })
        .sum();
    let multi: Vec<&Seen> = jobs
        .iter()
        .zip(seen)
        .filter(|(j, _)| matches!(j.ask, Ask::Gpus(n) if n > 1))
        .map(|(_, s)| s)
        .collect();
    Figures {
        stranded: jobs
            .iter()
            .zip(seen)
            .filter(|(j, s)| matches!(j.ask, Ask::Gpus(_)) && s.stranded >= STRANDED)
            .count(),
        fragmented: jobs
            .iter()
            .zip(seen)
            .filter(|(j, s)| matches!(j.ask, Ask::Gpus(_)) && s.fragmented >= STRANDED)
            .count(),
        mean: mean(&all),
        p99: all
            .get((all.len() * 99 / 100).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default(),
        small_mean: mean(&small),
        utilisation: used / (f64::from(whole_gpus) * span.as_secs_f64().max(1.0)),
        island: (
            multi.iter().filter(|s| s.one_island == Some(true)).count(),
            multi.len(),
        ),
    }
}

/// The variants' table, in Markdown.
pub fn print(rows: &[(&str, Figures)]) {
    println!("| variant | stranded-capacity waits | pending mean / p99 s | small pods pending mean s | GPU-hours used / available | multi-GPU pods on one NVLink island |");
    println!("|---|---|---|---|---|---|");
    for (name, f) in rows {
        println!(
            "| {name} | {} ({}) | {:.1} / {:.1} | {:.1} | {:.2} | {} of {} |",
            f.stranded,
            f.fragmented,
            f.mean.as_secs_f64(),
            f.p99.as_secs_f64(),
            f.small_mean.as_secs_f64(),
            f.utilisation,
            f.island.0,
            f.island.1
        );
    }
}

/// Whether the devices allocated to `claim` share one NVLink island (`island` names a
/// device's by pool and device); `None` while it is not allocated.
pub fn one_island(
    claim: &ResourceClaim,
    island: impl Fn(&str, &str) -> Option<String>,
) -> Option<bool> {
    let results = claim
        .status
        .as_ref()?
        .allocation
        .as_ref()?
        .devices
        .as_ref()?
        .results
        .as_ref()?;
    let of: Vec<Option<String>> = results.iter().map(|r| island(&r.pool, &r.device)).collect();
    let first = of.first()?;
    Some(first.is_some() && of.iter().all(|i| i == first))
}
