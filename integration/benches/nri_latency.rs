//! Figures for docs/benchmarks.md (not a timed test; the machines are noisy):
//!
//! 1. plugin-side CreateContainer handling (decode, records lookup, adjustment, encode)
//!    with 1, 100 and 1000 claims recorded on the node;
//! 2. Synchronize with 1000 running containers, through the SDK over a socket: the answer
//!    (before decoding, and through ttrpc after decoding and handling, side by side) and
//!    the end of the verification after it;
//! 3. CRI CreateContainer latency on two real containerd 2.2 instances, one with graft-nri
//!    attached and one without, interleaved in one run;
//! 4. graft-nri's resident memory.
//!
//! Run: cargo build --release --workspace --bins && cargo bench -p graft-integration --bench nri_latency [-- plugin sync cri]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use graft_integration::bench::{numbered_claim, paired, pct, rss_kib};
use graft_integration::records::char_node;
use graft_integration::{Containerd, Cri, GraftNri, Testbed, Version};
use graft_record::*;

/// A claim of the CRI side, for the pod's `containers`.
fn claim(i: usize, pod_uid: &str, containers: &[String]) -> ClaimRecord {
    let edits = ContainerEdits {
        device_nodes: vec![char_node("/dev/graft-bench0", 1, 3, 0o666)],
        env: vec![EnvVar {
            name: "GRAFT_BENCH".into(),
            value: i.to_string(),
        }],
        ..Default::default()
    };
    numbered_claim(i, pod_uid, containers, edits)
}

#[path = "../../nri-plugin/benches/support/fixtures.rs"]
mod fixtures;
use fixtures::{create, plugin_with_claims, sync_request, synchronize_runs, within_10ms};

fn us(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1000.0
}

async fn plugin_side() {
    println!("## Plugin-side CreateContainer handling (decode + lookup + adjustment + encode), 5000 calls each\n");
    println!("| claims on node | pod | p50 µs | p99 µs | max µs |");
    println!("|---|---|---|---|---|");
    for n in [1usize, 100, 1000] {
        let dir = tempfile::tempdir().unwrap();
        let plugin = plugin_with_claims(dir.path(), n);
        for (label, pod) in [
            ("holds a claim", "pod-uid-00000"),
            ("holds none", "pod-uid-none"),
        ] {
            let _warm = create(&plugin, pod, 200, None).await;
            let s = create(&plugin, pod, 5000, None).await;
            println!(
                "| {n} | {label} | {:.1} | {:.1} | {:.1} |",
                us(pct(&s, 0.5)),
                us(pct(&s, 0.99)),
                us(*s.last().unwrap())
            );
        }
    }
}

/// Synchronize as the runtime sends it: once, to a plugin that has just started, so its
/// record cache is empty, through the SDK over a socket from the SDK's scripted runtime.
/// Each run is a fresh plugin on the same records; each of 30 rounds times both of the
/// SDK's ways in turn: answered before decoding (graft-nri as shipped) and through ttrpc,
/// decoded and handled first. The check of the running containers runs after the answer
/// and is timed to its end as well.
fn synchronize_side() {
    let (n, rounds) = (1000, 30);
    let dir = tempfile::tempdir().unwrap();
    drop(plugin_with_claims(dir.path(), n));
    let bytes = sync_request(n);
    let runs = synchronize_runs(dir.path(), &bytes, rounds);
    println!("\n## Synchronize with {n} running containers, each holding a recorded claim ({} KiB request), {rounds} rounds of fresh plugins\n", bytes.len() / 1024);
    println!("| SDK path | until | p50 ms | max ms | answers within 10 ms |");
    println!("|---|---|---|---|---|");
    for (label, (answer, checked)) in [
        ("answered first", &runs.first),
        ("through ttrpc", &runs.ttrpc),
    ] {
        let (within, answer) = within_10ms(answer);
        let mut checked = checked.clone();
        checked.sort();
        for (until, times, within) in [
            ("the answer", &answer, format!("{within} of {rounds}")),
            ("the check's end", &checked, String::new()),
        ] {
            println!(
                "| {label} | {until} | {:.2} | {:.2} | {within} |",
                us(pct(times, 0.5)) / 1000.0,
                us(*times.last().unwrap()) / 1000.0
            );
        }
    }
    let ms = |d: &Vec<Duration>| d.iter().map(|d| us(*d) / 1000.0).collect::<Vec<_>>();
    println!(
        "\nanswer, first / through ttrpc, p50: {:.3}; check's end: {:.3} ({rounds} rounds, value [95 % bootstrap interval over rounds])",
        paired::ratio(&ms(&runs.first.0), &ms(&runs.ttrpc.0), 0.5),
        paired::ratio(&ms(&runs.first.1), &ms(&runs.ttrpc.1), 0.5),
    );
}

async fn cri_side() -> anyhow::Result<()> {
    let rounds = 100;
    let tb = Testbed::load()?;
    let base = PathBuf::from(format!("/tmp/graft-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let with_dir = base.join("with");
    let without_dir = base.join("without");
    let mut cd_with = Containerd::start(&tb, Version::V2_2, &with_dir)?;
    let mut cd_without = Containerd::start(&tb, Version::V2_2, &without_dir)?;
    // Each in a mount namespace of its own, so that neither's mounts slow the other.
    cd_with.isolate()?;
    cd_without.isolate()?;
    let state = with_dir.join("graft-state");
    let store = RecordStore::open(&state)?;
    // 1000 claims on the node; the measured pod holds one that names every container.
    let names: Vec<String> = (0..rounds).map(|i| format!("c{i}")).collect();
    for i in 1..1000 {
        store.put_claim(&claim(
            i,
            &format!("other-pod-{i:05}"),
            &["app".to_string()],
        ))?;
    }
    store.put_claim(&claim(0, "bench-pod-with", &names))?;
    let mut nri = GraftNri::start(
        &cd_with.nri_socket,
        &state,
        &with_dir.join("logs/graft-nri.log"),
        &[],
    )?;
    nri.wait_synchronized(Duration::from_secs(60))?;
    let pid = nri.pid().unwrap_or(0);

    let cri_with = Cri::connect(&cd_with.socket, &with_dir.join("pods")).await?;
    let cri_without = Cri::connect(&cd_without.socket, &without_dir.join("pods")).await?;
    let pod_with = cri_with.run_pod("bench", "bench-pod-with").await?;
    let pod_without = cri_without.run_pod("bench", "bench-pod-without").await?;
    // Warm both: image unpack, snapshotter, first NRI call.
    cri_with.create(&pod_with, "warm", "true").await?;
    cri_without.create(&pod_without, "warm", "true").await?;

    let (mut with, mut without) = (Vec::new(), Vec::new());
    for (i, name) in names.iter().enumerate() {
        // Alternate who goes first, so that neither side always follows the other.
        let order: [bool; 2] = if i % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for attached in order {
            let (cri, pod, out) = if attached {
                (&cri_with, &pod_with, &mut with)
            } else {
                (&cri_without, &pod_without, &mut without)
            };
            let t = Instant::now();
            let id = cri.create(pod, name, "exec sleep 3600").await?;
            out.push(t.elapsed());
            // Removed each round (not timed), so that create time does not drift.
            cri.remove_container(&id).await?;
        }
    }
    let (rss, hwm) = rss_kib(pid);
    let injected = nri.log_text().matches("injecting recorded devices").count();
    let secs = |v: &[Duration]| v.iter().map(|d| d.as_secs_f64() * 1e3).collect::<Vec<_>>();
    let (w, wo) = (secs(&with), secs(&without));
    let over = paired::quantile_estimate(&paired::differences(&w, &wo), 0.5);
    let ratio = paired::ratio(&w, &wo, 0.5);
    with.sort();
    without.sort();
    let ms = |d: Duration| us(d) / 1000.0;
    println!("\n## CRI CreateContainer on containerd 2.2.7, {rounds} interleaved rounds, containers removed each round, each containerd in its own mount namespace (1000 claims on the node, every measured container injected: {injected})\n");
    println!("| | p50 ms | p90 ms | max ms |");
    println!("|---|---|---|---|");
    println!(
        "| graft-nri attached | {:.2} | {:.2} | {:.2} |",
        ms(pct(&with, 0.5)),
        ms(pct(&with, 0.9)),
        ms(*with.last().unwrap())
    );
    println!(
        "| no plugin | {:.2} | {:.2} | {:.2} |",
        ms(pct(&without, 0.5)),
        ms(pct(&without, 0.9)),
        ms(*without.last().unwrap())
    );
    println!(
        "\npaired by round, [95 % bootstrap interval]: overhead p50 {over:.3} ms; ratio of the medians attached/none {ratio:.3}"
    );
    println!("\n## graft-nri memory after the run\n\nVmRSS {rss} KiB ({:.1} MiB), VmHWM {hwm} KiB ({:.1} MiB)", rss as f64 / 1024.0, hwm as f64 / 1024.0);

    drop(nri);
    drop(cd_with);
    drop(cd_without);
    let _ = std::fs::remove_dir_all(&base);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // `-- plugin sync cri`: the parts to run (default: all).
    let what: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let want = |w: &str| what.is_empty() || what.iter().any(|x| x == w);
    if want("plugin") {
        // On a worker thread, as graft-nri's handlers run (not on the thread blocking on it).
        rt.block_on(rt.spawn(plugin_side()))?;
    }
    if want("sync") {
        synchronize_side();
    }
    if want("cri") {
        rt.block_on(cri_side())?;
    }
    Ok(())
}
