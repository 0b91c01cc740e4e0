//! graft-nri side by side with containerd's own device-injector NRI plugin (for
//! docs/benchmarks.md; not a timed test, the machines are noisy).
//!
//! Three containerd 2.2 instances on the same machine: one without any plugin, one with
//! graft-nri, one with device-injector (built by integration/testbed/build-nri-plugins.sh).
//! Each runs pods of five containers with the same config and annotations, in which the
//! bench creates the same containers, round-robin across the three (the first side rotates
//! each round). Both plugins inject the same char device node into every container:
//! graft-nri from the pod's claim record (999 other claims on the node), device-injector
//! from the pod annotation. Reports CRI CreateContainer p50/p99 per side, each plugin's
//! overhead over none, and both plugins' resident memory after the run; fails if either
//! plugin did not inject.
//!
//! Run: cargo build --release --workspace --bins && cargo bench -p graft-integration --bench nri_vs_injector
//! GRAFT_BENCH_ROUNDS (default 250) sets the measured containers per side,
//! GRAFT_BENCH_PER_POD (default 5) the containers per pod.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use graft_integration::bench::{numbered_claim, pct, rss_kib};
use graft_integration::records::char_node;
use graft_integration::{Containerd, Cri, GraftNri, Testbed, Version};
use graft_record::{ClaimRecord, ContainerEdits, RecordStore};

const DEVICE: &str = "/dev/graft-bench0";
/// The same node for both plugins: char 1:3, mode 0666.
const INJECTOR_ANNOTATION: (&str, &str) = (
    "devices.noderesource.dev/pod",
    "- {path: /dev/graft-bench0, type: c, major: 1, minor: 3, file_mode: 438}",
);
const WARMUP: usize = 10;
/// Containers per pod (GRAFT_BENCH_PER_POD): a pod's claim record names each container
/// that uses the claim, and graft-nri reads that record on every CreateContainer, so the
/// pods are kept the size of real ones (one pod of 260 containers makes a 7.6 KiB record).
const PER_POD: usize = 5;

fn claim(i: usize, pod_uid: &str, containers: &[String]) -> ClaimRecord {
    let edits = ContainerEdits {
        device_nodes: vec![char_node(DEVICE, 1, 3, 0o666)],
        ..Default::default()
    };
    numbered_claim(i, pod_uid, containers, edits)
}

/// containerd's device-injector as a child process, stopped on drop.
struct Injector {
    child: Child,
    log: PathBuf,
}

impl Injector {
    fn start(nri_socket: &Path, log: &Path) -> anyhow::Result<Self> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("testbed/build-nri-plugins.sh");
        let out = Command::new("bash")
            .arg(&script)
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("running {}", script.display()))?;
        if !out.status.success() {
            bail!("{} failed", script.display());
        }
        let bin = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .map(PathBuf::from)
            .context("build-nri-plugins.sh printed no path")?;
        let file = File::create(log)?;
        let child = Command::new(&bin)
            .args(["-idx", "10", "-socket-path"])
            .arg(nri_socket)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Injector {
            child,
            log: log.to_path_buf(),
        })
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Injector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

/// Whether the stored runtime spec of `id` holds the bench's device node.
fn has_device(cd: &Containerd, id: &str) -> anyhow::Result<bool> {
    let spec = cd.runtime_spec(id)?;
    let devices = spec["linux"]["devices"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok(devices.iter().any(|d| d["path"] == DEVICE))
}

struct Side {
    label: &'static str,
    cd: Containerd,
    cri: Cri,
    pod: graft_integration::cri::Pod,
    times: Vec<Duration>,
    last_id: String,
}

/// UID of the `n`th bench pod of a side.
fn pod_uid(label: &str, n: usize) -> String {
    format!("bench-pod-{label}-{n:03}")
}

/// The side's `n`th pod, with the injector's annotation on every side.
async fn start_pod(
    cri: &Cri,
    label: &str,
    n: usize,
) -> anyhow::Result<graft_integration::cri::Pod> {
    cri.run_pod_annotated("bench", &pod_uid(label, n), &[INJECTOR_ANNOTATION])
        .await
}

async fn side(label: &'static str, cd: Containerd, base: &Path) -> anyhow::Result<Side> {
    let cri = Cri::connect(&cd.socket, &base.join(label).join("pods")).await?;
    let pod = start_pod(&cri, label, 0).await?;
    Ok(Side {
        label,
        cd,
        cri,
        pod,
        times: Vec::new(),
        last_id: String::new(),
    })
}

impl Side {
    /// Moves on to the side's `n`th pod (not timed).
    async fn next_pod(&mut self, n: usize) -> anyhow::Result<()> {
        self.pod = start_pod(&self.cri, self.label, n).await?;
        Ok(())
    }
}

async fn run() -> anyhow::Result<()> {
    let rounds: usize = std::env::var("GRAFT_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(250);
    let per_pod: usize = std::env::var("GRAFT_BENCH_PER_POD")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(PER_POD);
    let tb = Testbed::load()?;
    let base = PathBuf::from(format!("/tmp/graft-bvi-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let cd_none = Containerd::start(&tb, Version::V2_2, &base.join("none"))?;
    let cd_graft = Containerd::start(&tb, Version::V2_2, &base.join("graft"))?;
    let cd_inj = Containerd::start(&tb, Version::V2_2, &base.join("injector"))?;
    let cd_version = cd_none.crictl(&["version"])?;

    // Container names are the same on every side; each graft pod's claim names its own.
    let names: Vec<String> = (0..WARMUP + rounds).map(|i| format!("c{i}")).collect();
    let state = base.join("graft/graft-state");
    let store = RecordStore::open(&state)?;
    for i in 1..1000 {
        store.put_claim(&claim(i, &format!("other-pod-{i:05}"), &["app".into()]))?;
    }
    for (n, chunk) in names.chunks(per_pod).enumerate() {
        store.put_claim(&claim(1000 + n, &pod_uid("graft-nri", n), chunk))?;
    }
    let mut graft = GraftNri::start(
        &cd_graft.nri_socket,
        &state,
        &base.join("graft/logs/graft-nri.log"),
        &[],
    )?;
    graft.wait_synchronized(Duration::from_secs(60))?;
    let injector = Injector::start(&cd_inj.nri_socket, &base.join("injector/logs/injector.log"))?;

    let mut sides = [
        side("none", cd_none, &base).await?,
        side("graft-nri", cd_graft, &base).await?,
        side("device-injector", cd_inj, &base).await?,
    ];
    // Warm-up: image unpack, snapshotter, first NRI calls; also waits until the injector
    // has registered (it connects on its own schedule).
    let start = Instant::now();
    for n in 0.. {
        let s = &sides[2];
        let id = s.cri.create(&s.pod, &format!("probe{n}"), "true").await?;
        if has_device(&s.cd, &id)? {
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            bail!(
                "device-injector did not inject within 30 s:\n{}",
                injector.log_text()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    for (i, name) in names.iter().enumerate() {
        if i > 0 && i % per_pod == 0 {
            for s in sides.iter_mut() {
                s.next_pod(i / per_pod).await?;
            }
        }
        for k in 0..3 {
            let s = &mut sides[(i + k) % 3];
            let t = Instant::now();
            let id = s.cri.create(&s.pod, name, "exec sleep 3600").await?;
            let took = t.elapsed();
            if i >= WARMUP {
                s.times.push(took);
            }
            s.last_id = id;
        }
    }
    let graft_rss = rss_kib(graft.pid().unwrap_or(0));
    let inj_rss = rss_kib(injector.child.id());

    // Each plugin really injected; the side without a plugin did not get the node.
    for (s, want) in sides.iter().zip([false, true, true]) {
        let got = has_device(&s.cd, &s.last_id)?;
        if got != want {
            bail!(
                "{}: device in the last container's spec: {got}, expected {want}",
                s.label
            );
        }
    }
    let graft_count = graft
        .log_text()
        .matches("injecting recorded devices")
        .count();
    let inj_count = injector.log_text().matches("injected device").count();
    if graft_count < rounds || inj_count < rounds {
        bail!("injections logged: graft-nri {graft_count}, device-injector {inj_count}, measured {rounds}");
    }

    for s in sides.iter_mut() {
        s.times.sort();
    }
    let (p50_none, p99_none) = (pct(&sides[0].times, 0.5), pct(&sides[0].times, 0.99));
    println!("## CRI CreateContainer: none / graft-nri / device-injector\n");
    println!(
        "containerd: {}",
        cd_version.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    println!("{rounds} measured containers per side after {WARMUP} warm-up, round-robin, {per_pod} per pod; injections logged: graft-nri {graft_count}, device-injector {inj_count}; device in the spec checked\n");
    println!("| | p50 ms | p99 ms | max ms | p50 over none ms | p99 over none ms |");
    println!("|---|---|---|---|---|---|");
    let mut over = Vec::new();
    for s in &sides {
        let (p50, p99) = (pct(&s.times, 0.5), pct(&s.times, 0.99));
        let (o50, o99) = (ms(p50) - ms(p50_none), ms(p99) - ms(p99_none));
        over.push((o50, o99));
        println!(
            "| {} | {:.2} | {:.2} | {:.2} | {:+.2} ({:+.1}%) | {:+.2} ({:+.1}%) |",
            s.label,
            ms(p50),
            ms(p99),
            ms(*s.times.last().unwrap_or(&Duration::ZERO)),
            o50,
            o50 / ms(p50_none) * 100.0,
            o99,
            o99 / ms(p99_none) * 100.0,
        );
    }
    let p50 = |i: usize| ms(pct(&sides[i].times, 0.5));
    let p99 = |i: usize| ms(pct(&sides[i].times, 0.99));
    println!(
        "\nratio graft-nri/device-injector: p50 {:.3}, p99 {:.3}; of the overheads over none: p50 {:.2}, p99 {:.2}",
        p50(1) / p50(2),
        p99(1) / p99(2),
        over[1].0 / over[2].0,
        over[1].1 / over[2].1
    );
    println!("\n## Plugin memory after the run\n");
    println!("| | VmRSS MiB | VmHWM MiB |");
    println!("|---|---|---|");
    for (label, (rss, hwm)) in [("graft-nri", graft_rss), ("device-injector", inj_rss)] {
        println!(
            "| {label} | {:.1} | {:.1} |",
            rss as f64 / 1024.0,
            hwm as f64 / 1024.0
        );
    }

    drop(injector);
    drop(graft);
    drop(sides);
    let _ = std::fs::remove_dir_all(&base);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run())
}
