//! The fleet at 1,000 and 5,000 simulated GPU nodes (integration/src/fleet): the testbed's
//! real API server, controller-manager and two kube-schedulers, one plain and one whose
//! profile calls graft-scheduler-extender, with the ComputeDomain controller and one real
//! graft-driver (containerd, graft-nri, its nvidia family on a fake GPU node) beside them.
//! Printed per size:
//! - kube-scheduler's throughput (pods bound per second, scheduler_perf's measure) on the
//!   same seeded pods with and without the extender, in pairs run in alternating order,
//!   and the ratio with its 95 % interval over the pairs;
//! - the extender's and the controller's resident memory and CPU, and the extender's time
//!   per call;
//! - API requests per second by caller (the audit log, by User-Agent), idle and during the
//!   rounds, and what one graft-driver asks;
//! - last, on a clique made that wide for them, ComputeDomains of 64 and 256 nodes: from
//!   their pods' creation to the domain Ready and every pod bound.
//!
//! Run: `cargo build --release --workspace --bins && bash hooks/build-static.sh --quiet &&
//! cargo bench -p graft-integration --bench fleet`. GRAFT_FLEET_SIZES (1000,5000),
//! GRAFT_FLEET_PAIRS (3), GRAFT_FLEET_PODS (400 per round), GRAFT_FLEET_IDLE_S (60),
//! GRAFT_FLEET_CLAIMS (10000 claims at rest, for the memory each costs),
//! GRAFT_FLEET_DOMAINS (64,256; "" for none);
//! GRAFT_FLEET_KEEP=1 keeps the logs; GRAFT_FLEET_BINS=DIR takes graft's binaries from DIR;
//! GRAFT_FLEET_CTL_PEER=PATH runs an earlier controller build beside, measured alike.

#[path = "fleet/report.rs"]
mod report;

use std::time::{Duration, Instant};

use graft_integration::dra_node::DraNode;
use graft_integration::fake_gpu::FakeNode;
use graft_integration::fleet::audit;
use graft_integration::fleet::kubelet::Kubelet;
use graft_integration::fleet::{domains, nodes, shapes::Shapes, workload, Fleet};
use graft_integration::scrape;
use graft_integration::testbed::Testbed;
use k8s_openapi::jiff::Timestamp;
use report::{Figures, Pair};

const GRAFT_PROFILE: &str = "graft-gpu";
/// The rack number of the wide clique ComputeDomains are measured on.
const WIDE_RACK: usize = 10_000;
/// The real graft-driver's char devices, beside its GPUs.
const DEVICES: &str = "[[devices]]\npath = \"/dev/null\"\nattributes = { type = \"test\" }\n";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn metric(addr: &str, series: &str) -> f64 {
    let text = scrape::tcp_get(addr, "/metrics")
        .map(|(_, t)| t)
        .unwrap_or_default();
    scrape::value(&text, series).unwrap_or(0.0)
}

async fn one_size(
    tb: &Testbed,
    shapes: &Shapes,
    size: usize,
    root: &std::path::Path,
) -> anyhow::Result<Figures> {
    let pairs = env_or("GRAFT_FLEET_PAIRS", 3) as usize;
    let pods = env_or("GRAFT_FLEET_PODS", 400) as usize;
    let idle = Duration::from_secs(env_or("GRAFT_FLEET_IDLE_S", 60));
    let mut fleet = Fleet::start(tb, &root.join(format!("cp-{size}")))?;
    fleet.device_classes(tb)?;
    let c = fleet.client().await?;
    let plan = nodes::plan(size);
    let t = Instant::now();
    let slices = nodes::make(&c, shapes, &plan).await?;
    let made_in = t.elapsed();
    fleet.nodes_ready(&c, Duration::from_secs(600)).await?;
    eprintln!(
        "{size} nodes, {slices} slices made in {:.0} s",
        made_in.as_secs_f64()
    );
    let _kubelet = Kubelet::start(c.clone());
    let ext = fleet.extender(&[])?;
    let ctl = fleet.cd_controller(tb)?;
    // GRAFT_FLEET_CTL_PEER=PATH: an earlier controller build beside it, measured alike.
    let peer = match std::env::var_os("GRAFT_FLEET_CTL_PEER") {
        Some(p) => {
            Some(fleet.controller_process("controller-peer", p.as_ref(), "graft-cd-peer")?)
        }
        None => None,
    };
    fleet.scheduler("kube-scheduler", &["default-scheduler"], None)?;
    fleet.scheduler("kube-scheduler-graft", &[GRAFT_PROFILE], Some(&ext.usage))?;
    // One real graft-driver (containerd, graft-nri, its nvidia family on a fake GPU node)
    // in the fleet: what one node's driver asks of the API server.
    let gpu = FakeNode::create(&root.join(format!("driver-node-{size}")))?;
    let hook = root.join(format!("driver-node-{size}/bin/graft-hook"));
    let mut args: Vec<String> = ["--discovery", "char,nvidia"].map(String::from).into();
    args.extend(gpu.nvidia_args(&hook, &graft_integration::testbed::static_hook()?));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _driver = DraNode::start_with(&fleet.cp, "sim-driver", DEVICES, &args).await?;
    tokio::time::sleep(Duration::from_secs(20)).await;
    fleet.check()?;
    let ext_idle = ext.proc.rss_kib();
    let ctl_idle = ctl.proc.rss_kib();
    let peer_idle = peer.as_ref().map(|p| p.proc.rss_kib());

    let t0 = Timestamp::now();
    tokio::time::sleep(idle).await;
    let t1 = Timestamp::now();

    let mut runs = Vec::new();
    let (calls0, secs0) = (
        metric(
            &ext.metrics,
            "graft_scheduler_extender_call_duration_seconds_count",
        ),
        metric(
            &ext.metrics,
            "graft_scheduler_extender_call_duration_seconds_sum",
        ),
    );
    let ext_cpu0 = ext.proc.cpu_time();
    let t2 = Timestamp::now();
    for pair in 0..pairs {
        let asks = workload::asks(pair as u64 + 1, pods);
        let order = if pair % 2 == 0 {
            ["default-scheduler", GRAFT_PROFILE]
        } else {
            [GRAFT_PROFILE, "default-scheduler"]
        };
        let mut got = [0.0f64; 2];
        for scheduler in order {
            let ns = format!("fleet-{size}-{pair}-{scheduler}");
            let r = workload::round(&c, &ns, scheduler, &asks, Duration::from_secs(300)).await?;
            eprintln!(
                "  pair {pair} {scheduler}: {}/{} bound in {:.1} s, {:.1} pods/s (created in {:.1} s)",
                r.bound,
                r.pods,
                r.bound_in.as_secs_f64(),
                r.throughput(),
                r.created_in.as_secs_f64()
            );
            anyhow::ensure!(
                r.bound == r.pods,
                "{ns}: {:?}",
                workload::unbound(&c, &ns, 3).await?
            );
            got[usize::from(scheduler == GRAFT_PROFILE)] = r.throughput();
            workload::clear(&c, &ns, Duration::from_secs(300)).await?;
        }
        runs.push(Pair {
            without: got[0],
            with: got[1],
        });
        fleet.check()?;
    }
    let t3 = Timestamp::now();
    // Claims at rest: GRAFT_FLEET_CLAIMS unallocated one-GPU claims, and what each costs
    // the extender and the controller, who cache every claim.
    let claims_n = env_or("GRAFT_FLEET_CLAIMS", 10_000) as usize;
    let (ext_before, ctl_before) = (ext.proc.rss_kib().0, ctl.proc.rss_kib().0);
    let ns = format!("fleet-{size}-claims");
    workload::claims_at_rest(&c, &ns, claims_n).await?;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let per_claim = (
        (ext.proc.rss_kib().0 as f64 - ext_before as f64) * 1024.0 / claims_n.max(1) as f64,
        (ctl.proc.rss_kib().0 as f64 - ctl_before as f64) * 1024.0 / claims_n.max(1) as f64,
    );
    workload::clear(&c, &ns, Duration::from_secs(600)).await?;
    let (ext_after, ctl_after) = (ext.proc.rss_kib(), ctl.proc.rss_kib());
    let peer_after = peer.as_ref().map(|p| p.proc.rss_kib());
    // Under a Lease of its own it would place the domains below too.
    drop(peer);

    // ComputeDomains of GRAFT_FLEET_DOMAINS nodes, on one clique that wide made for them
    // after the figures above (nodes::wide_clique).
    let mut domain_runs = Vec::new();
    let wanted = list_env("GRAFT_FLEET_DOMAINS", "64,256");
    if let Some(&most) = wanted.iter().max() {
        let wide = nodes::wide_clique(size, most + 8, WIDE_RACK);
        nodes::make(&c, shapes, &wide).await?;
        fleet.nodes_ready(&c, Duration::from_secs(300)).await?;
        // Each size twice: pods as written, and pods also selecting the clique's nodes.
        let runs = wanted.iter().flat_map(|&n| [(n, false), (n, true)]);
        for (k, (n, pin)) in runs.enumerate() {
            let ns = format!("fleet-{size}-domain-{k}");
            let r = domains::ready(&c, &ns, n, pin, Duration::from_secs(600)).await?;
            eprintln!(
                "  domain of {n} (pods pinned to its clique: {pin}): placed in {:.1} s; pods \
                 made in {:.1} s, Ready {:.1} s and all bound {:.1} s after the first",
                r.placed_in.as_secs_f64(),
                r.created_in.as_secs_f64(),
                r.ready_in.as_secs_f64(),
                r.bound_in.as_secs_f64()
            );
            domain_runs.push(r);
            domains::clear(&c, &ns, Duration::from_secs(300)).await?;
            fleet.check()?;
        }
    }
    let calls = metric(
        &ext.metrics,
        "graft_scheduler_extender_call_duration_seconds_count",
    ) - calls0;
    let secs = metric(
        &ext.metrics,
        "graft_scheduler_extender_call_duration_seconds_sum",
    ) - secs0;
    Ok(Figures {
        size,
        slices,
        made_in,
        pods,
        pairs: runs,
        ext_idle,
        ext_after,
        ctl_idle,
        ctl_after,
        peer: peer_idle.zip(peer_after),
        ext_cpu: ext.proc.cpu_time().saturating_sub(ext_cpu0),
        ext_calls: calls,
        ext_call_s: secs,
        claims: claims_n,
        per_claim,
        idle: audit::count(&fleet.audit_log, t0, t1)?,
        idle_s: (t1 - t0)
            .total(k8s_openapi::jiff::Unit::Second)
            .unwrap_or(1.0),
        busy: audit::count(&fleet.audit_log, t2, t3)?,
        busy_s: (t3 - t2)
            .total(k8s_openapi::jiff::Unit::Second)
            .unwrap_or(1.0),
        domains: domain_runs,
    })
}

/// A comma-separated list of numbers from `name`, `default` when unset ("" for none).
fn list_env(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

fn main() -> anyhow::Result<()> {
    let sizes = list_env("GRAFT_FLEET_SIZES", "1000,5000");
    let tb = Testbed::load()?;
    let root = tempfile::Builder::new()
        .prefix("graft-fleet")
        .tempdir_in("/tmp")?;
    let shapes = Shapes::discover(&root.path().join("shapes"))?;
    let rt = graft_integration::fleet::runtime()?;
    let mut all = Vec::new();
    for size in sizes {
        let f = rt.block_on(one_size(&tb, &shapes, size, root.path()))?;
        report::print(&f);
        all.push(f);
    }
    report::summary(&all);
    if std::env::var_os("GRAFT_FLEET_KEEP").is_some() {
        eprintln!("logs and audit logs kept in {}", root.keep().display());
    }
    Ok(())
}
