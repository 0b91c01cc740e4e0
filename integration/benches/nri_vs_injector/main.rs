//! graft-nri side by side with the floor any plugin on graft's SDK pays (graft-null-nri) and
//! with containerd's own device-injector NRI plugin (for docs/benchmarks.md; not a timed
//! test, the machines are noisy).
//!
//! Five containerd 2.2 instances, each in a mount namespace of its own: one without any
//! plugin, one with graft-null-nri, one with graft-nri, one with device-injector (built by
//! integration/testbed/build-nri-plugins.sh), and one with graft-null-nri answering through
//! ttrpc's tasks instead of the SDK's inline CreateContainer path. Each round creates one container on every
//! side, in an order that rotates each round, then removes them (not timed). Every
//! GRAFT_BENCH_PER_POD rounds each side moves to a new pod; graft-nri's pod gets its claim
//! record just before, as a prepare does, so the first container of a pod is its own case.
//! Both device plugins inject the same char device node: graft-nri from the pod's claim
//! record (999 other claims on the node), device-injector from the pod annotation.
//!
//! Per call: CRI CreateContainer as the client sees it, the run-queue wait of containerd's
//! and the plugin's threads during it, and (as root, with uprobes) containerd's wait for the
//! plugin's answer. Every call goes to a CSV under target/bench-samples; the figures are
//! paired by round with 95 % bootstrap intervals. Fails if a plugin did not inject.
//!
//! Run: cargo build --release --workspace --bins && cargo bench -p graft-integration --bench nri_vs_injector
//! GRAFT_BENCH_ROUNDS (default 300) sets the measured rounds, GRAFT_BENCH_PER_POD (default 3)
//! the containers per pod. GRAFT_BENCH_FROM=<samples file> reports a past run again.
//! GRAFT_BENCH_TMPFS=all puts every containerd's root and state (and the plugins' files) on a
//! tmpfs: no disk under containerd's metadata writes, to see which part of the tail they are;
//! GRAFT_BENCH_TMPFS=graft-state only graft-nri's state directory, to see graft's part.

mod report;
mod sides;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use graft_integration::bench::mem::Footprint;
use graft_integration::bench::numbered_claim;
use graft_integration::bench::samples::Samples;
use graft_integration::bench::uprobe::{Hit, Uprobes};
use graft_integration::records::char_node;
use graft_integration::{Containerd, GraftNri, Testbed, Version};
use graft_record::{ClaimRecord, ContainerEdits, RecordStore};

use report::{Round, GRAFT, INJECTOR, LABELS, NONE, NULL, NULL_TTRPC, SIDES};
use sides::{has_device, pod_uid, Plugin, Side, DEVICE};

const WARMUP: usize = 10;
/// Containers per pod: most pods have one to three.
const PER_POD: usize = 3;
/// containerd sends a plugin its CreateContainer here, and applies its answer there.
/// (Probes inside that span, on `(*mux).write` and `(*stream).receive`, were tried to split
/// it: they made it 17 times longer, so the turnaround is only bracketed.)
const PROBES: [(&str, &str); 2] = [
    (
        "nri_create",
        "github.com/containerd/nri/pkg/adaptation.(*plugin).createContainer",
    ),
    (
        "nri_apply",
        "github.com/containerd/nri/pkg/adaptation.(*result).apply",
    ),
];

fn claim(i: usize, pod_uid: &str, containers: &[String]) -> ClaimRecord {
    let edits = ContainerEdits {
        device_nodes: vec![char_node(DEVICE, 1, 3, 0o666)],
        ..Default::default()
    };
    numbered_claim(i, pod_uid, containers, edits)
}

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

/// containerd `pid`'s wait for its plugin in one round's hits, in microseconds.
fn turnaround(hits: &[Hit], pid: Option<u32>) -> f64 {
    let mine: Vec<&Hit> = hits.iter().filter(|h| Some(h.tgid) == pid).collect();
    let sent = mine.iter().find(|h| h.event == PROBES[0].0);
    let applied = sent.and_then(|s| {
        mine.iter()
            .find(|h| h.event == PROBES[1].0 && h.secs >= s.secs)
    });
    match (sent, applied) {
        (Some(s), Some(a)) => (a.secs - s.secs) * 1e6,
        _ => f64::NAN,
    }
}

async fn run() -> anyhow::Result<()> {
    let rounds = env_usize("GRAFT_BENCH_ROUNDS", 300);
    let per_pod = env_usize("GRAFT_BENCH_PER_POD", PER_POD);
    let tb = Testbed::load()?;
    let base = PathBuf::from(format!("/tmp/graft-bvi-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let tmpfs = std::env::var("GRAFT_BENCH_TMPFS").unwrap_or_default();
    let _all_tmpfs = match tmpfs.as_str() {
        "" | "graft-state" => None,
        "all" => Some(Tmpfs::mount(&base)?),
        other => bail!("GRAFT_BENCH_TMPFS={other}: expected all or graft-state"),
    };
    let mut cds = Vec::new();
    for label in LABELS {
        let mut cd = Containerd::start(&tb, Version::V2_2, &base.join(label))?;
        cd.isolate()?;
        cds.push(cd);
    }
    let cd_version = cds[NONE].crictl(&["version"])?;
    let state = base.join("graft-nri/graft-state");
    let state_tmpfs = match tmpfs.as_str() {
        "graft-state" => Some(Tmpfs::mount(&state)?),
        _ => None,
    };
    let store = RecordStore::open(&state)?;
    for i in 1..1000 {
        store.put_claim(&claim(i, &format!("other-pod-{i:05}"), &["app".into()]))?;
    }
    let mut graft = GraftNri::start(
        &cds[GRAFT].nri_socket,
        &state,
        &base.join("graft-nri/logs/graft-nri.log"),
        &[],
    )?;
    graft.wait_synchronized(Duration::from_secs(60))?;
    let null = Plugin::null(&cds[NULL].nri_socket, &base.join("null.log"), false)?;
    let injector = Plugin::injector(&cds[INJECTOR].nri_socket, &base.join("injector.log"))?;
    let null_ttrpc = Plugin::null(
        &cds[NULL_TTRPC].nri_socket,
        &base.join("null-ttrpc.log"),
        true,
    )?;
    let pids = [
        None,
        Some(null.child.id()),
        graft.pid(),
        Some(injector.child.id()),
        Some(null_ttrpc.child.id()),
    ];
    let binary = cds[NONE].binary();
    let mut sides = Vec::new();
    for (s, cd) in cds.into_iter().enumerate() {
        sides.push(Side::new(LABELS[s], cd, &base, pids[s], s == GRAFT || s == INJECTOR).await?);
    }
    let probes = match Uprobes::attach(
        &binary,
        &format!("graft_bvi_{}", std::process::id()),
        &PROBES,
    ) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("no turnaround figures: {e:#}");
            None
        }
    };

    // Warm-up until both plugins have registered (they connect on their own schedule).
    let names: Vec<String> = (0..WARMUP + rounds).map(|i| format!("c{i}")).collect();
    let start = Instant::now();
    'ready: loop {
        for s in sides.iter_mut() {
            s.next_pod(0).await?;
        }
        let probe = sides[INJECTOR].create("probe").await?;
        let nulls = [&null, &null_ttrpc];
        let synced = nulls.iter().all(|p| p.log_text().contains("Synchronized"));
        if synced && has_device(&sides[INJECTOR].cd, &probe.id)? {
            break 'ready;
        }
        if start.elapsed() > Duration::from_secs(30) {
            bail!(
                "the plugins were not all ready within 30 s:\ndevice-injector:\n{}\ngraft-null-nri:\n{}\ngraft-null-nri --via-ttrpc:\n{}",
                injector.log_text(),
                null.log_text(),
                null_ttrpc.log_text()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let mut samples = Samples::create(
        "nri_vs_injector",
        &[
            "round",
            "first",
            "side",
            "order",
            "create_us",
            "waited_us",
            "turnaround_us",
        ],
    )?;
    let mut measured = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let first = i % per_pod == 0;
        if first {
            let n = i / per_pod + 1;
            let chunk = &names[i..(i + per_pod).min(names.len())];
            store.put_claim(&claim(1000 + n, &pod_uid(LABELS[GRAFT], n), chunk))?;
            for s in sides.iter_mut() {
                s.next_pod(n).await?;
            }
        }
        if let Some(p) = &probes {
            p.drain()?;
        }
        let mut round = Round {
            first,
            took: [0.0; SIDES],
            waited: [0.0; SIDES],
            turnaround: [f64::NAN; SIDES],
        };
        let mut order = [0; SIDES];
        let mut ids = vec![String::new(); SIDES];
        for k in 0..SIDES {
            let s = (i + k) % SIDES;
            let call = sides[s].create(name).await?;
            round.took[s] = call.took.as_secs_f64() * 1e6;
            round.waited[s] = call.waited.as_secs_f64() * 1e6;
            order[s] = k;
            ids[s] = call.id;
        }
        if let Some(p) = &probes {
            let hits = p.drain()?;
            for (s, side) in sides.iter().enumerate().skip(1) {
                round.turnaround[s] = turnaround(&hits, side.cd.pid());
            }
        }
        let last = i + 1 == names.len();
        for (s, side) in sides.iter().enumerate() {
            if last && has_device(&side.cd, &ids[s])? != side.injects {
                bail!(
                    "{}: the device is {}in the last container's spec",
                    side.label,
                    if side.injects { "not " } else { "" }
                );
            }
            side.cri
                .remove_container(&ids[s])
                .await
                .with_context(|| format!("{}: removing {}", side.label, ids[s]))?;
            if i >= WARMUP {
                samples.row(&[
                    (i - WARMUP).to_string(),
                    first.to_string(),
                    LABELS[s].to_string(),
                    order[s].to_string(),
                    format!("{:.1}", round.took[s]),
                    format!("{:.1}", round.waited[s]),
                    format!("{:.1}", round.turnaround[s]),
                ])?;
            }
        }
        if i >= WARMUP {
            measured.push(round);
        }
    }
    let csv = samples.finish()?;
    let graft_mem = Footprint::of(graft.pid().unwrap_or(0));
    let inj_mem = Footprint::of(injector.child.id());
    let null_mem = Footprint::of(null.child.id());
    let graft_count = graft
        .log_text()
        .matches("injecting recorded devices")
        .count();
    let inj_count = injector.log_text().matches("injected device").count();
    if graft_count < rounds || inj_count < rounds {
        bail!("injections logged: graft-nri {graft_count}, device-injector {inj_count}, measured {rounds}");
    }

    println!("## NRI CreateContainer: none / graft-null-nri / graft-nri / device-injector / graft-null-nri-via-ttrpc\n");
    println!(
        "containerd: {}",
        cd_version.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    println!("{rounds} measured rounds after {WARMUP} warm-up, one create per side each round in a rotating order, containers removed each round, {per_pod} per pod, each containerd in its own mount namespace; injections logged: graft-nri {graft_count}, device-injector {inj_count}; device in the spec checked; samples: target/bench-samples/{}", csv.file_name().unwrap_or_default().to_string_lossy());
    println!("Figures: value [95 % bootstrap interval over rounds].");
    cases(&measured);
    println!("\n## Plugin memory after the run\n");
    println!(
        "| | RSS MiB | anonymous + dirty MiB | anonymous MiB | clean private file pages MiB |"
    );
    println!("|---|---|---|---|---|");
    let mib = |k: u64| k as f64 / 1024.0;
    for (label, f) in [
        ("graft-nri", graft_mem),
        ("graft-null-nri", null_mem),
        ("device-injector", inj_mem),
    ] {
        println!(
            "| {label} | {:.1} | {:.1} | {:.1} | {:.1} |",
            mib(f.rss),
            mib(f.own()),
            mib(f.anonymous),
            mib(f.private_clean)
        );
    }
    drop(probes);
    drop(injector);
    drop(null);
    drop(null_ttrpc);
    drop(graft);
    drop(sides);
    drop(state_tmpfs);
    let _ = std::fs::remove_dir_all(&base);
    Ok(())
}

/// A tmpfs at a directory, unmounted (lazily) and the directory removed on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &std::path::Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(at)?;
        graft_integration::mounts::mount_tmpfs(at, "4g")?;
        println!("on a tmpfs: {}", at.display());
        Ok(Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if let Err(e) = graft_integration::mounts::unmount(&self.0) {
            eprintln!("{e:#}");
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The report's three cases.
fn cases(measured: &[Round]) {
    let all: Vec<&Round> = measured.iter().collect();
    let firsts: Vec<&Round> = measured.iter().filter(|r| r.first).collect();
    let later: Vec<&Round> = measured.iter().filter(|r| !r.first).collect();
    report::case("Every container", &all, 0.99);
    report::case(
        "First container of a pod (graft-nri reads its record)",
        &firsts,
        0.9,
    );
    report::case("Later containers of a pod", &later, 0.99);
}

fn main() -> anyhow::Result<()> {
    // Reports a samples file again instead of measuring.
    if let Some(path) = std::env::var_os("GRAFT_BENCH_FROM") {
        let path = PathBuf::from(path);
        println!(
            "Figures of {}: value [95 % bootstrap interval over rounds].",
            path.display()
        );
        cases(&report::read_samples(&path)?);
        return Ok(());
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run())
}
