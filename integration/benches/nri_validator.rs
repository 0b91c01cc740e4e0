//! What graft's NRI validator (`graft-nri --validate`) costs a container creation, for
//! docs/benchmarks.md (figures, not a timed test):
//!
//! 1. the validator's handler alone (records read, plan, check), 1000 claims on the node;
//! 2. CRI CreateContainer on two containerd 2.4 instances side by side, both with graft-nri
//!    and the same 1000 claims, one with the validator as well, interleaved in one run; the
//!    ratio of the medians with a 95 % bootstrap interval;
//! 3. the validator's resident memory.
//!
//! Run: cargo build --release --workspace --bins && cargo bench -p graft-integration --bench nri_validator

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use graft_integration::bench::{median_ratio, numbered_claim, pct, rss_kib};
use graft_integration::records::char_node;
use graft_integration::{Containerd, Cri, GraftNri, Testbed, Version};
use graft_nri::inject::plan;
use graft_nri::validator::Validator;
use graft_nri_sdk::NriPlugin;
use graft_proto::nri;
use graft_record::*;

fn claim(i: usize, pod_uid: &str, containers: &[String]) -> ClaimRecord {
    let edits = ContainerEdits {
        device_nodes: vec![char_node("/dev/graft-bench0", 1, 3, 0o666)],
        ..Default::default()
    };
    numbered_claim(i, pod_uid, containers, edits)
}

/// 1000 claims in `state`; pod `pod` holds the one naming `names`.
fn record(state: &std::path::Path, pod: &str, names: &[String]) -> anyhow::Result<RecordStore> {
    let store = RecordStore::open(state)?;
    for i in 1..1000 {
        store.put_claim(&claim(i, &format!("other-pod-{i:05}"), &["app".into()]))?;
    }
    store.put_claim(&claim(0, pod, names))?;
    Ok(store)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn handler_side() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let names = vec!["app".to_string()];
    let store = record(dir.path(), "pod-held", &names)?;
    let policy = InjectionPolicy::new(dir.path(), "/hook", &[])?;
    let claims = store.pod_claims_shared("pod-held")?;
    let p = plan(&claims, "pod-held", "app", &policy)?.ok_or(anyhow::anyhow!("no plan"))?;
    let adjust = p.adjustment_with(p.annotation());
    let v = Arc::new(Validator::new(store, policy, Duration::from_secs(1)));
    println!("## The validator's handler alone (1000 claims on the node), 5000 calls each\n");
    println!("| pod | p50 µs | p99 µs |");
    println!("|---|---|---|");
    for (label, uid) in [("holds a claim", "pod-held"), ("holds none", "pod-none")] {
        let mut t = Vec::new();
        for i in 0..5200 {
            let req = nri::ValidateContainerAdjustmentRequest {
                pod: Some(nri::PodSandbox {
                    uid: uid.into(),
                    ..Default::default()
                })
                .into(),
                container: Some(nri::Container {
                    name: "app".into(),
                    ..Default::default()
                })
                .into(),
                adjust: Some(adjust.clone()).into(),
                ..Default::default()
            };
            let start = Instant::now();
            let r = v.validate_container_adjustment(req).await?;
            anyhow::ensure!(!r.reject, "{}", r.reason);
            if i >= 200 {
                t.push(start.elapsed());
            }
        }
        t.sort();
        println!(
            "| {label} | {:.1} | {:.1} |",
            pct(&t, 0.5).as_secs_f64() * 1e6,
            pct(&t, 0.99).as_secs_f64() * 1e6
        );
    }
    Ok(())
}

async fn cri_side(rounds: usize) -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let base = PathBuf::from(format!("/tmp/graft-bench-validator-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let names: Vec<String> = (0..rounds).map(|i| format!("c{i}")).collect();
    let mut sides = Vec::new();
    let (mut keep, mut containerds) = (Vec::new(), Vec::new());
    let mut validator_pid = 0;
    for (label, validate) in [("graft-nri", false), ("graft-nri + validator", true)] {
        let dir = base.join(if validate { "validated" } else { "plain" });
        let cd = Containerd::start(&tb, Version::V2_4, &dir)?;
        let state = dir.join("graft-state");
        let pod_uid = format!("bench-pod-{validate}");
        record(&state, &pod_uid, &names)?;
        let mut nri = GraftNri::start(&cd.nri_socket, &state, &dir.join("logs/nri.log"), &[])?;
        nri.wait_synchronized(Duration::from_secs(60))?;
        if validate {
            let v = GraftNri::start(
                &cd.nri_socket,
                &state,
                &dir.join("logs/validator.log"),
                &["--validate"],
            )?;
            v.wait_log("configured by the runtime", Duration::from_secs(60))?;
            validator_pid = v.pid().unwrap_or(0);
            keep.push(v);
        }
        let cri = Cri::connect(&cd.socket, &dir.join("pods")).await?;
        let pod = cri.run_pod("bench", &pod_uid).await?;
        cri.create(&pod, "warm", "true").await?;
        sides.push((label, cri, pod, Vec::new()));
        keep.push(nri);
        containerds.push(cd);
    }
    for (i, name) in names.iter().enumerate() {
        // Alternate who goes first, so that neither side always follows the other.
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for s in order {
            let (_, cri, pod, out) = &mut sides[s];
            let t = Instant::now();
            cri.create(pod, name, "exec sleep 3600").await?;
            out.push(t.elapsed());
        }
    }
    println!("\n## CRI CreateContainer on containerd 2.4.2, {rounds} interleaved rounds (1000 claims on each node, every measured container injected)\n");
    println!("| | p50 ms | p90 ms | p99 ms |");
    println!("|---|---|---|---|");
    for (label, _, _, t) in sides.iter_mut() {
        t.sort();
        println!(
            "| {label} | {:.2} | {:.2} | {:.2} |",
            ms(pct(t, 0.5)),
            ms(pct(t, 0.9)),
            ms(pct(t, 0.99))
        );
    }
    let (r, lo, hi) = median_ratio(&sides[0].3, &sides[1].3);
    println!("\nmedian ratio with validator / without: {r:.3} (95 % bootstrap interval {lo:.3} to {hi:.3}, {rounds} creates a side)");
    let (rss, hwm) = rss_kib(validator_pid);
    println!(
        "\n## The validator's memory after the run\n\nVmRSS {rss} KiB ({:.1} MiB), VmHWM {hwm} KiB",
        rss as f64 / 1024.0
    );
    drop(keep);
    drop(containerds);
    let _ = std::fs::remove_dir_all(&base);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let rounds = std::env::var("GRAFT_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // On a worker thread, as the validator's handlers run.
    rt.block_on(rt.spawn(handler_side()))??;
    rt.block_on(cri_side(rounds))
}
