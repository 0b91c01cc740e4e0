//! ComputeDomain start-up on the multi-node testbed, side by side: two pods on two nodes of
//! one clique (nodes 2 and 3), either
//! - **domain**: each with the claim of a two-node ComputeDomain's workload template (the
//!   domain created, and its clique chosen, before the clock starts): the scheduler
//!   allocates each pod's channel and holds the pod until graft's controller reports the
//!   domain's IMEX daemon on its node Ready (DRA binding conditions); the allocations make
//!   the nodes members, so the daemons are scheduled, prepared, connect to each other and
//!   turn Ready meanwhile; or
//! - **plain**: the same pods without a claim (the floor any pod pays). With ComputeDomains
//!   on, a plain `imex-channel.graft.dev` claim is never prepared (and, with binding
//!   conditions, never bound), so it is no peer any more: rows before 2026-12-03 compared
//!   against such claims and are not comparable with later ones.
//!
//! Timed from the first pod's first watch event to the last pod's Ready (`pod_clock`), the
//! two pods created in one apply. The kinds take turns round by round, rotating which goes
//! first; each round's pods (and domain) are deleted and waited out before the next.
//!
//! Run (root, the testbed; graft from the debug build, as the cluster tests install it):
//! `cargo build --workspace --bins && bash hooks/build-static.sh --quiet &&
//! cargo bench -p graft-integration --bench compute_domain_startup`. GRAFT_BENCH_ROUNDS:
//! rounds (5); GRAFT_BENCH_EVENTS=1 prints each domain round's Events and daemon pod
//! conditions (where the time went). Not part of CI; takes the host's one testbed cluster (run it under the same
//! lock as the cluster tests).

use std::time::Duration;

use anyhow::{ensure, Context};
use graft_integration::bench::pct;
use graft_integration::cluster::multi::domains::{compute_domain, plain_pod, template_pod};
use graft_integration::cluster::multi::MultiCluster;
use graft_integration::cluster::wait_until;
use graft_integration::pod_clock::PodClock;

const NS: &str = "default";
/// The label `template_pod` gives its pods.
const LABEL: &str = "graft-test=domains";
const FABRIC: &str = "6a7b8c9d0e1f4a5b9c8d7e6f5a4b3c2d";
const FABRICS: [Option<(&str, u32)>; 3] = [Some((FABRIC, 8)), Some((FABRIC, 7)), Some((FABRIC, 7))];
const LIMIT: Duration = Duration::from_secs(180);

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Domain,
    Plain,
}

/// One round of `kind`: the two pods' creation to both Ready; then everything removed.
async fn once(
    mc: &MultiCluster,
    clock: &PodClock,
    kind: Kind,
    i: usize,
) -> anyhow::Result<Duration> {
    let c = &mc.cluster;
    let (n2, n3) = (&mc.nodes[1], &mc.nodes[2]);
    let (prefix, template) = match kind {
        Kind::Domain => {
            let d = format!("d{i}");
            let t = format!("{d}-channel");
            c.apply(&compute_domain(NS, &d, 2, &t, "Single"))?;
            mc.wait_domain(NS, &d, "no clique chosen", |v| {
                v["status"]["clique"].is_string()
            })?;
            wait_until(&format!("no template {t}"), || {
                Ok(c.kubectl(&["-n", NS, "get", "resourceclaimtemplate", &t])
                    .is_ok())
            })?;
            (d, t)
        }
        Kind::Plain => (format!("p{i}"), String::new()),
    };
    let (a, b) = (format!("{prefix}-a"), format!("{prefix}-b"));
    let pods = match kind {
        Kind::Domain => {
            template_pod(NS, &a, &template, Some(n2)) + &template_pod(NS, &b, &template, Some(n3))
        }
        Kind::Plain => plain_pod(NS, &a, n2) + &plain_pod(NS, &b, n3),
    };
    c.apply(&pods)?;
    clock.wait_ready(&a, LIMIT).await.context(a.clone())?;
    clock.wait_ready(&b, LIMIT).await.context(b.clone())?;
    let (sa, sb) = (
        clock.get(&a).unwrap_or_default(),
        clock.get(&b).unwrap_or_default(),
    );
    let first = sa.added.min(sb.added).context("no creation seen")?;
    let last = sa.ready.max(sb.ready).context("no Ready seen")?;
    let took = last.saturating_duration_since(first);

    if kind == Kind::Domain && std::env::var_os("GRAFT_BENCH_EVENTS").is_some() {
        eprintln!("{}", timeline(mc));
    }
    c.kubectl(&["-n", NS, "delete", "pod", &a, &b, "--wait=true"])?;
    if kind == Kind::Domain {
        let uid = mc.domain(NS, &prefix)?["metadata"]["uid"]
            .as_str()
            .map(str::to_string)
            .context("no uid")?;
        c.kubectl(&["-n", NS, "delete", "computedomain", &prefix, "--wait=true"])?;
        mc.wait_domain_gone(NS, &prefix, &uid)?;
    }
    mc.wait_unprepared(NS)?;
    Ok(took)
}

/// Where a domain round's time went: the cluster's Events in order (whole seconds), and
/// the IMEX daemon pods' condition changes.
fn timeline(mc: &MultiCluster) -> String {
    let get = |args: &[&str]| {
        mc.cluster
            .kubectl(args)
            .unwrap_or_else(|e| format!("{e:#}\n"))
    };
    let cols = "custom-columns=CREATED:.metadata.creationTimestamp,LAST:.lastTimestamp,N:.count,\
                OBJECT:.involvedObject.name,REASON:.reason,MESSAGE:.message";
    let conds =
        "jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName}{range .status.conditions[*]} \
                 {.type}={.lastTransitionTime}{end}{\"\\n\"}{end}";
    format!(
        "--- events\n{}--- daemon pods\n{}",
        get(&[
            "get",
            "events",
            "-A",
            "--sort-by=.metadata.creationTimestamp",
            "-o",
            cols
        ]),
        get(&[
            "-n",
            "graft-system",
            "get",
            "pods",
            "-l",
            "resource.graft.dev/computeDomain",
            "-o",
            conds
        ]),
    )
}

fn p50(v: &[Duration]) -> f64 {
    let mut v = v.to_vec();
    v.sort();
    pct(&v, 0.5).as_secs_f64()
}

async fn run(mc: &MultiCluster, rounds: usize) -> anyhow::Result<()> {
    mc.deploy_domains(&FABRICS, 1)?;
    let clock = PodClock::start(mc.cluster.client().await?, NS, LABEL).await?;
    let kinds = [Kind::Domain, Kind::Plain];
    let mut took: [Vec<Duration>; 2] = Default::default();
    for i in 0..rounds {
        for j in 0..2 {
            let k = (i + j) % 2;
            let t = once(mc, &clock, kinds[k], i).await?;
            eprintln!("round {i}: {} {t:?}", ["domain", "plain"][k]);
            took[k].push(t);
        }
    }
    let (domain, plain) = (p50(&took[0]), p50(&took[1]));
    let max = |v: &[Duration]| v.iter().max().map_or(0.0, |d| d.as_secs_f64());
    println!(
        "two pods on two nodes, creation to both Ready, {rounds} rounds of each, taking turns"
    );
    println!("| pods | rounds | p50 s | max s |");
    println!("|---|---|---|---|");
    println!(
        "| two-node ComputeDomain's workload claims | {rounds} | {domain:.2} | {:.2} |",
        max(&took[0])
    );
    println!(
        "| pods without a claim | {rounds} | {plain:.2} | {:.2} |",
        max(&took[1])
    );
    println!("median ratio domain/plain: {:.1}", domain / plain);
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::var("GRAFT_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    ensure!(rounds > 0, "GRAFT_BENCH_ROUNDS must be at least 1");
    let mc = MultiCluster::up(3)?;
    let r = run(&mc, rounds).await;
    let left = mc.down()?;
    r?;
    ensure!(left.is_empty(), "down left behind: {left:?}");
    Ok(())
}
