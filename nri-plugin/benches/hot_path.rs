//! graft-nri's hot paths in-process, without a runtime: CreateContainer for a pod that holds
//! one of 1000 recorded claims, for one that holds none, and Synchronize with 1000 running
//! containers. Builds only graft-nri's own dependencies, so that a profile (callgrind) and
//! a side-by-side of two trees are cheap; `integration/benches/nri_latency.rs` is the full
//! bench with real containerd instances.
//!
//! The calls run in a task on a worker thread of a two-worker runtime, as graft-nri's
//! handlers do (not on the thread that blocks on the runtime).
//!
//! `sync`: Synchronize through the SDK over a socket from the SDK's scripted runtime, to a
//! fresh plugin each run, both of the SDK's ways in each round: answered before decoding
//! (as shipped) and through ttrpc, decoded and handled first.
//!
//! `floor`: the same loop around a busy wait as long as `create`'s p50, in the same runtime:
//! the tail this machine gives any piece of work that long, which no handler goes below.
//!
//! `gpu`: the injection plan of a GPU claim (policy checks, merge) with the driver's files
//! bound one by one and as the prepared directory, alternating in one loop.
//!
//! `modes`: CreateContainer with `--unclaimed-gpu-requests` at `keep` (the binary's default)
//! and at `clear` (the chart's on GPU nodes), for a pod with a claim and one without, on the
//! same requests (20 variables, none of NVIDIA's), in alternating rounds of 500.
//!
//! Run: cargo bench -p graft-nri --bench hot_path [-- create|none|idle|sync|floor|gpu|modes] (default: all).
//! `GRAFT_BENCH_CALLS` sets the number of CreateContainer calls (default 5000).

use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "support/fixtures.rs"]
mod fixtures;
#[path = "support/gpu.rs"]
mod gpu;
use fixtures::{create, plugin_with_claims, sync_request, synchronize_runs, within_10ms};

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_nanos() as f64 / 1000.0
}

fn main() {
    let what = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
    let want = |w: &str| what.as_deref().is_none_or(|x| x == w);
    let calls: usize = std::env::var("GRAFT_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = Arc::new(plugin_with_claims(dir.path(), 1000));
    // `idle`: 200 calls 20 ms apart, as a runtime makes them (cold caches each time).
    let idle = Some(Duration::from_millis(20));
    for (name, pod, n, idle) in [
        ("create", "pod-uid-00000", calls, None),
        ("none", "pod-uid-none", calls, None),
        ("idle", "pod-uid-00000", 200, idle),
    ] {
        if want(name) {
            let p = plugin.clone();
            let s = rt
                .block_on(rt.spawn(async move {
                    let _warm = create(&p, pod, n / 10 + 1, None).await;
                    create(&p, pod, n, idle).await
                }))
                .expect("bench task");
            println!(
                "CreateContainer, 1000 claims, {name}: p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
                pct(&s, 0.5),
                pct(&s, 0.99),
                pct(&s, 1.0)
            );
        }
    }
    if want("floor") {
        let p = plugin.clone();
        let s = rt
            .block_on(rt.spawn(async move {
                let mut c = create(&p, "pod-uid-00000", calls, None).await;
                let work = c[c.len() / 2];
                let mut f = Vec::with_capacity(calls);
                for _ in 0..calls {
                    let t = Instant::now();
                    while t.elapsed() < work {
                        std::hint::spin_loop();
                    }
                    // Yield as the handler's await points do.
                    tokio::task::yield_now().await;
                    f.push(t.elapsed());
                }
                f.sort();
                c.sort();
                (c, f)
            }))
            .expect("bench task");
        let (c, f) = s;
        println!(
            "CreateContainer p50 {:.1} µs, p99 {:.1} µs; a busy wait of its p50 in the same loop: p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
            pct(&c, 0.5),
            pct(&c, 0.99),
            pct(&f, 0.5),
            pct(&f, 0.99),
            pct(&f, 1.0)
        );
    }
    if want("gpu") {
        let state = "/var/lib/graft";
        let policy = gpu::policy(state);
        let recs = [false, true].map(|prepared| gpu::claim("pod-gpu", gpu::edits(state, prepared)));
        let mut times = [Vec::with_capacity(calls), Vec::with_capacity(calls)];
        for round in 0..calls / 100 {
            for k in [round % 2, 1 - round % 2] {
                for _ in 0..100 {
                    let t = Instant::now();
                    let plan = graft_nri::inject::plan(&recs[k..=k], "pod-gpu", "app", &policy);
                    times[k].push(t.elapsed());
                    assert!(matches!(plan, Ok(Some(_))), "{plan:?}");
                }
            }
        }
        for t in &mut times {
            t.sort();
        }
        println!(
            "GPU claim's injection plan: files one by one p50 {:.1} µs, p99 {:.1} µs; prepared directory p50 {:.1} µs, p99 {:.1} µs; p50 ratio {:.2}",
            pct(&times[0], 0.5),
            pct(&times[0], 0.99),
            pct(&times[1], 0.5),
            pct(&times[1], 0.99),
            pct(&times[1], 0.5) / pct(&times[0], 0.5)
        );
    }
    if want("modes") {
        let dir2 = tempfile::tempdir().expect("tempdir");
        let clear = Arc::new(
            plugin_with_claims(dir2.path(), 1000)
                .with_unclaimed_gpu_requests(graft_nri::unclaimed::Mode::Clear),
        );
        let plugins = [plugin.clone(), clear];
        for pod in ["pod-uid-00000", "pod-uid-none"] {
            let ps = plugins.clone();
            let [keep, clear] = rt
                .block_on(rt.spawn(async move {
                    let mut t = [Vec::new(), Vec::new()];
                    for (i, p) in ps.iter().enumerate() {
                        let _warm = create(p, pod, 500, None).await;
                        t[i].clear();
                    }
                    for round in 0..(calls / 500).max(2) {
                        for k in [round % 2, 1 - round % 2] {
                            t[k].extend(create(&ps[k], pod, 500, None).await);
                        }
                    }
                    for v in &mut t {
                        v.sort();
                    }
                    t
                }))
                .expect("bench task");
            println!(
                "CreateContainer, {pod}: keep p50 {:.1} µs, p99 {:.1} µs; clear p50 {:.1} µs, p99 {:.1} µs; p50 ratio clear/keep {:.3} ({} calls each)",
                pct(&keep, 0.5),
                pct(&keep, 0.99),
                pct(&clear, 0.5),
                pct(&clear, 0.99),
                pct(&clear, 0.5) / pct(&keep, 0.5),
                keep.len()
            );
        }
    }
    if want("sync") {
        // As the runtime sends it: once, to a plugin that has just started (its record cache
        // empty), through the SDK over a socket. Each run is a fresh plugin on the same
        // records; each round times both of the SDK's ways.
        drop(plugin);
        let bytes = sync_request(1000);
        let runs = synchronize_runs(dir.path(), &bytes, 30);
        for (label, (answer, checked)) in [
            ("answered first", &runs.first),
            ("through ttrpc, handled first", &runs.ttrpc),
        ] {
            let (within, answer) = within_10ms(answer);
            let mut checked = checked.clone();
            checked.sort();
            println!(
                "Synchronize, 1000 containers, 30 fresh plugins, {label}: answer p50 {:.2} ms, max {:.2} ms ({within} of 30 within 10 ms); the check after it ends at p50 {:.2} ms, max {:.2} ms",
                pct(&answer, 0.5) / 1000.0,
                pct(&answer, 1.0) / 1000.0,
                pct(&checked, 0.5) / 1000.0,
                pct(&checked, 1.0) / 1000.0
            );
        }
    }
}
