//! GPU placement under churn, with the real kube-scheduler on the four-node testbed: one
//! seeded stream of pods asking for 1, 2, 4 or 8 whole GPUs or a MIG instance, arriving and
//! finishing over time, run three times:
//! - **default**: graft publishing dynamic-MIG placements in NVML's order
//!   (`GRAFT_NVIDIA_PLACEMENT_ORDER=nvml`, what graft did before), no extender;
//! - **order**: graft's placement order (docs/placement.md), no extender;
//! - **order+extender**: the same, with graft-scheduler-extender packing (kube-scheduler is
//!   configured for it in every variant, `ignorable`; where it is not installed the call is
//!   refused at once and ignored).
//!
//! Nodes: four fake H100 nodes of 8 GPUs, NVLink islands 0-3 and 4-7 on each; on the fourth,
//! GPUs 4 and 5 in MIG mode and partitioned by graft (dynamic MIG), so 30 whole GPUs.
//!
//! Per variant it reports: stranded-capacity waits (whole-GPU pods that stayed unscheduled
//! for at least 3 s in all while the cluster had enough free whole GPUs in total; in
//! brackets, those of them that waited 3 s while no single node had room), mean and
//! p99 time pending (all pods, and the small ones: 1 GPU or a MIG instance), whole-GPU
//! hours used over available (from the first arrival to the last finish), and the share of
//! multi-GPU pods placed within one NVLink island. Then the same stream replayed without a
//! cluster by an ideal scheduler (`placement/model.rs`) under four node rules: the bound on
//! what node choice alone can do. GRAFT_BENCH_MODEL_ONLY=1 prints only that, in a second.
//!
//! Run (root, the testbed; not part of CI; under the cluster tests' lock):
//! `cargo build --workspace --bins && bash hooks/build-static.sh --quiet &&
//! cargo bench -p graft-integration --bench placement`. GRAFT_BENCH_SEED (1), GRAFT_BENCH_PODS
//! (60), GRAFT_BENCH_GAP_MS (mean gap between arrivals, 4000: whole-GPU demand about 0.8 of
//! the 30 GPUs), GRAFT_BENCH_RUN_S (a pod runs between this and twice this, 30),
//! GRAFT_BENCH_HOLD_MS (the replay only: how long past its run a pod keeps its GPUs, 0).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use graft_integration::cluster::gpu::{GpuValues, FAKE_DIR, MIG_STATE};
use graft_integration::cluster::multi::{MultiCluster, EXTENDER};
use graft_integration::cluster::workloads::wait_unprepared;
use graft_integration::cluster::{wait_until, Cluster};
use graft_scheduler_extender::state;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use serde_json::Value;

#[path = "placement/model.rs"]
mod model;
#[path = "placement/seen.rs"]
mod seen;
#[path = "placement/stream.rs"]
mod stream;

use seen::{figures, Seen, TICK};
use stream::{env_or, pod_yaml, stream, Ask, Job};

const LABEL: &str = "graft-bench=placement";

fn list<T: k8s_openapi::serde::de::DeserializeOwned>(
    c: &Cluster,
    kind: &str,
) -> anyhow::Result<Vec<T>> {
    let v: Value = serde_json::from_str(&c.kubectl(&["get", kind, "-A", "-o", "json"])?)?;
    let items = v["items"].as_array().cloned().unwrap_or_default();
    items
        .into_iter()
        .map(|i| serde_json::from_value(i).with_context(|| format!("a {kind} item")))
        .collect()
}

/// The islands of the devices allocated to `pod`'s claim: all equal, or not.
fn same_island(pod: &str, claims: &[ResourceClaim], slices: &[ResourceSlice]) -> Option<bool> {
    let claim = claims.iter().find(|c| {
        c.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.name == pod)
    })?;
    seen::one_island(claim, |pool, device| {
        slices
            .iter()
            .filter(|s| s.spec.pool.name == pool)
            .flat_map(|s| s.spec.devices.iter().flatten())
            .find(|d| d.name == device)
            .and_then(|d| d.attributes.as_ref()?.get(state::ISLAND)?.string.clone())
    })
}

/// One variant over the whole stream.
fn run(c: &Cluster, jobs: &[Job]) -> anyhow::Result<Vec<Seen>> {
    let mut seen: Vec<Seen> = jobs.iter().map(|_| Seen::default()).collect();
    let index: BTreeMap<&str, usize> = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| (j.name.as_str(), i))
        .collect();
    let t0 = Instant::now();
    let mut next = 0;
    let limit = jobs.last().map_or(Duration::ZERO, |j| j.arrive) + Duration::from_secs(900);
    while seen.iter().any(|s| s.finished.is_none()) {
        anyhow::ensure!(
            t0.elapsed() < limit,
            "the stream did not finish within {limit:?}"
        );
        let tick = Instant::now();
        let mut yaml = String::new();
        while next < jobs.len() && jobs[next].arrive <= t0.elapsed() {
            yaml += &pod_yaml(&jobs[next]);
            seen[next].created = Some(Instant::now());
            next += 1;
        }
        if !yaml.is_empty() {
            c.apply(&yaml)?;
        }
        let pods: Value =
            serde_json::from_str(&c.kubectl(&["get", "pods", "-l", LABEL, "-o", "json"])?)?;
        let slices: Vec<ResourceSlice> = list(c, "resourceslices")?;
        let claims: Vec<ResourceClaim> = list(c, "resourceclaims")?;
        let nodes = state::nodes("graft.dev", &slices, &claims);
        let free: usize = nodes.values().map(|n| n.free()).sum();
        let most: usize = nodes.values().map(|n| n.free()).max().unwrap_or(0);
        let now = Instant::now();
        let mut done = Vec::new();
        for p in pods["items"].as_array().into_iter().flatten() {
            let Some(&i) = p["metadata"]["name"].as_str().and_then(|n| index.get(n)) else {
                continue;
            };
            let s = &mut seen[i];
            if p["spec"]["nodeName"].is_string() && s.scheduled.is_none() {
                s.scheduled = Some(now);
            }
            if matches!(jobs[i].ask, Ask::Gpus(n) if n > 1)
                && s.scheduled.is_some()
                && s.one_island.is_none()
            {
                s.one_island = same_island(&jobs[i].name, &claims, &slices);
            }
            if matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
                && s.finished.is_none()
            {
                s.finished = Some(now);
                done.push(jobs[i].name.clone());
            }
            s.tick(jobs[i].ask, free, most);
        }
        if !done.is_empty() {
            let mut args = vec!["delete", "pod", "--wait=false"];
            args.extend(done.iter().map(String::as_str));
            c.kubectl(&args)?;
        }
        std::thread::sleep(TICK.saturating_sub(tick.elapsed()));
    }
    Ok(seen)
}

/// Installs graft for `variant` and waits until every node published and, with the
/// extender, until it is ready.
fn deploy(mc: &MultiCluster, order: &str, extender: bool) -> anyhow::Result<()> {
    let env = serde_json::json!([
        {"name": "GRAFT_PROC_ROOT", "value": format!("/host{FAKE_DIR}/proc")},
        {"name": "GRAFT_SYSFS_ROOT", "value": format!("/host{FAKE_DIR}/sys")},
        {"name": "GRAFT_NVIDIA_PLACEMENT_ORDER", "value": order},
    ]);
    let values = GpuValues {
        dynamic_mig: "all".into(),
        helm: vec![
            "--set".into(),
            format!("schedulerExtender.enabled={extender}"),
            // The bench's kube-scheduler calls it over plain HTTP (up_with below).
            "--set".into(),
            "schedulerExtender.tls.enabled=false".into(),
            "--set-json".into(),
            format!("driverExtraEnv={env}"),
        ],
        ..Default::default()
    };
    mc.deploy_gpu_with(&[None, None, None, None], &values)?;
    wait_until("a node's dynamic MIG GPUs were never published", || {
        Ok(mc.slices(&mc.nodes[3])?.contains("-mig-4g-40gb-0\""))
    })?;
    if extender {
        mc.wait_extender()?;
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let seed = env_or("GRAFT_BENCH_SEED", 1);
    let jobs = stream(
        seed,
        env_or("GRAFT_BENCH_PODS", 60) as usize,
        Duration::from_millis(env_or("GRAFT_BENCH_GAP_MS", 4000)),
        Duration::from_secs(env_or("GRAFT_BENCH_RUN_S", 30)),
    );
    if std::env::var_os("GRAFT_BENCH_MODEL_ONLY").is_some() {
        model::print(&jobs, model::bench_nodes());
        return Ok(());
    }
    let _turn = graft_integration::cluster::gpu::own_cluster();
    let mc = MultiCluster::up_with(4, Some(&format!("http://{EXTENDER}/")))?;
    let c = &mc.cluster;
    mc.label_control_plane()?;
    for (i, fake) in mc.fakes.iter().enumerate() {
        fake.set_nvlink(&[&[0, 1, 2, 3], &[4, 5, 6, 7]])?;
        // The fake's default has 6 and 7 in MIG mode with its operator's instances; here
        // only the fourth node has MIG GPUs, 4 and 5, all graft's to make.
        let mig = if i == 3 { "mig 4 on\nmig 5 on\n" } else { "" };
        fake.configure_mig(&format!("mig 6 off\nmig 7 off\n{mig}state {MIG_STATE}\n"))?;
    }
    let variants = [
        ("default", "nvml", false),
        ("order", "spare-large", false),
        ("order+extender", "spare-large", true),
    ];
    let mut rows = Vec::new();
    for (name, order, extender) in variants {
        deploy(&mc, order, extender)?;
        eprintln!("[placement] {name}: {} pods", jobs.len());
        let seen = run(c, &jobs)?;
        rows.push((name, figures(&jobs, &seen, 30)));
        c.kubectl(&[
            "delete",
            "pods,resourceclaimtemplates",
            "-l",
            LABEL,
            "--wait=true",
        ])?;
        wait_unprepared(c)?;
    }
    let asks = |f: fn(&Ask) -> bool| jobs.iter().filter(|j| f(&j.ask)).count();
    println!(
        "\nseed {seed}, {} pods ({} of 1 GPU, {} of 2, {} of 4, {} of 8, {} MIG), 4 nodes, 30 whole GPUs + 2 dynamic MIG\n",
        jobs.len(),
        asks(|a| matches!(a, Ask::Gpus(1))),
        asks(|a| matches!(a, Ask::Gpus(2))),
        asks(|a| matches!(a, Ask::Gpus(4))),
        asks(|a| matches!(a, Ask::Gpus(8))),
        asks(|a| matches!(a, Ask::Mig(_))),
    );
    seen::print(&rows);
    model::print(&jobs, model::bench_nodes());
    let left = mc.down()?;
    anyhow::ensure!(left.is_empty(), "the testbed left {left:?}");
    Ok(())
}
