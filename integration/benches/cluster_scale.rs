//! Scale on the single-node cluster: pods with claims created in bursts. graft serves
//! `BURST` char devices (nodes made for the run under /dev/graft-bench, the glob entry a
//! user would write in devicesToml); each burst creates `BURST` pods at once, each claiming
//! one of them through its own ResourceClaim, waits until all are Ready, then deletes them
//! and waits until every claim is unprepared. Printed: per burst, the time to all Ready
//! and pod start-up percentiles (watch events); over the run, prepare and CreateContainer
//! p50/p99 from graft's own histograms, and both daemons' peak RSS and CPU time.
//!
//! Run: `cargo build --release --workspace --bins && cargo bench -p graft-integration --bench cluster_scale`
//! GRAFT_BENCH_BURST (100: the kubelet's 110-pod limit less graft's own pod and headroom)
//! and GRAFT_BENCH_BURSTS (5).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use futures::{StreamExt, TryStreamExt};
use graft_integration::bench::{cpu_time, pct, pid_of, rss_kib};
use graft_integration::cluster::Cluster;
use graft_integration::pod_clock::PodClock;
use graft_integration::scrape;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

const DEV_DIR: &str = "/dev/graft-bench";
const LABEL: &str = "graft-bench=scale";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The device nodes the run serves (copies of /dev/null: a container may open them),
/// removed when dropped.
struct BenchNodes;

impl BenchNodes {
    fn make(n: usize) -> anyhow::Result<Self> {
        use nix::sys::stat::{makedev, mknod, Mode, SFlag};
        let _ = std::fs::remove_dir_all(DEV_DIR);
        std::fs::create_dir(DEV_DIR).with_context(|| format!("creating {DEV_DIR}"))?;
        for i in 0..n {
            let p = format!("{DEV_DIR}/s{i:03}");
            mknod(
                p.as_str(),
                SFlag::S_IFCHR,
                Mode::from_bits_truncate(0o666),
                makedev(1, 3),
            )
            .with_context(|| format!("mknod {p}"))?;
        }
        Ok(Self)
    }
}

impl Drop for BenchNodes {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(DEV_DIR);
    }
}

/// The default devices plus the bench's glob.
fn devices_toml(top: &Path) -> anyhow::Result<std::path::PathBuf> {
    let path = top.join("target/bench-devices.toml");
    std::fs::write(
        &path,
        format!(
            "[[devices]]\npath = \"/dev/fuse\"\nattributes = {{ type = \"fuse\" }}\n\n\
             [[devices]]\npath = \"{DEV_DIR}/s*\"\nattributes = {{ type = \"bench\" }}\n"
        ),
    )?;
    Ok(path)
}

/// Peak RSS and CPU time of the node's graft daemons, sampled every 100 ms.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<[(u64, Duration); 2]>>,
}

const DAEMONS: [&str; 2] = ["graft-driver", "graft-nri"];

impl Sampler {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let pids = DAEMONS.map(pid_of);
            let cpu0 = pids.map(|p| p.map(cpu_time).unwrap_or_default());
            let mut peak = [0u64; 2];
            while !flag.load(Ordering::Relaxed) {
                for (i, p) in pids.iter().enumerate() {
                    if let Some(p) = p {
                        peak[i] = peak[i].max(rss_kib(*p).0);
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let cpu1 = pids.map(|p| p.map(cpu_time).unwrap_or_default());
            [
                (peak[0], cpu1[0].saturating_sub(cpu0[0])),
                (peak[1], cpu1[1].saturating_sub(cpu0[1])),
            ]
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> [(u64, Duration); 2] {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

fn pod(name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"graft-bench": "scale"}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": "bench-slot"}],
            "containers": [{"name": "app", "image": "docker.io/library/busybox:test",
                            "imagePullPolicy": "Never", "command": ["/bin/sleep", "3600"],
                            "resources": {"claims": [{"name": "dev"}]}}]
        }
    }))?)
}

struct Metrics {
    prepare: Vec<(f64, f64)>,
    create: Vec<(f64, f64)>,
}

fn scrape_now(c: &Cluster) -> anyhow::Result<Metrics> {
    let get = |port: u16| -> anyhow::Result<String> {
        match scrape::tcp_get(&c.metrics_addr(port)?, "/metrics")? {
            (200, m) => Ok(m),
            (code, m) => anyhow::bail!("port {port}: HTTP {code}: {m}"),
        }
    };
    Ok(Metrics {
        prepare: scrape::buckets(
            &get(9477)?,
            "graft_driver_prepare_duration_seconds",
            "result=\"ok\"",
        ),
        create: scrape::buckets(
            &get(9478)?,
            "graft_nri_request_duration_seconds",
            "event=\"create_container\"",
        ),
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let burst = env_usize("GRAFT_BENCH_BURST", 100);
    let bursts = env_usize("GRAFT_BENCH_BURSTS", 5);
    let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let release = top.join("target/release");
    ensure!(
        release.join("graft-driver").exists() && release.join("graft-nri").exists(),
        "build graft first: cargo build --release --workspace --bins"
    );
    let nodes = BenchNodes::make(burst)?;
    let cluster = Cluster::up_with(&release, Some(&devices_toml(&top)?))?;
    let client = cluster.client().await?;
    cluster.apply(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: bench.graft.dev}\n\
         spec:\n  selectors:\n  - cel:\n      expression: device.driver == 'graft.dev' && \
         device.attributes['graft.dev'].?type.orValue('') == 'bench'\n---\n\
         apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\n\
         metadata: {name: bench-slot, namespace: default}\n\
         spec:\n  spec:\n    devices:\n      requests:\n      - name: dev\n        exactly: {deviceClassName: bench.graft.dev}\n",
    )?;
    // graft-driver published every bench device.
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let start = Instant::now();
    loop {
        let lp = ListParams::default().fields("spec.driver=graft.dev");
        let n: usize = slices
            .list(&lp)
            .await?
            .items
            .iter()
            .map(|s| s.spec.devices.as_ref().map_or(0, |d| d.len()))
            .sum();
        if n > burst {
            break;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(60),
            "{n} devices published, want {}",
            burst + 1
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let clock = PodClock::start(client.clone(), "default", LABEL).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), "default");

    let before = scrape_now(&cluster)?;
    let sampler = Sampler::start();
    let run_start = Instant::now();
    let mut all = Vec::new();
    println!("| burst | pods | all Ready s | start-up p50 ms | p99 ms | max ms | deleted and unprepared s |");
    println!("|---|---|---|---|---|---|---|");
    for b in 0..bursts {
        let names: Vec<String> = (0..burst).map(|i| format!("scale-{b}-{i:03}")).collect();
        let t0 = Instant::now();
        futures::stream::iter(names.iter().map(|n| pod(n)))
            .map(|p| {
                let pods = pods.clone();
                async move {
                    pods.create(&PostParams::default(), &p?)
                        .await
                        .map_err(anyhow::Error::from)
                }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<_>>()
            .await?;
        let mut took = Vec::new();
        for n in &names {
            took.push(
                clock
                    .wait_ready(n, Duration::from_secs(600))
                    .await
                    .with_context(|| cluster.dra_state())?,
            );
        }
        let ready = t0.elapsed();
        let t1 = Instant::now();
        pods.delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(LABEL),
        )
        .await?;
        let prepared = || {
            std::fs::read_dir("/var/lib/graft/claims")
                .map(|d| d.count())
                .unwrap_or(0)
        };
        while !pods
            .list(&ListParams::default().labels(LABEL))
            .await?
            .items
            .is_empty()
            || !claims.list(&ListParams::default()).await?.items.is_empty()
            || prepared() != 0
        {
            ensure!(
                t1.elapsed() < Duration::from_secs(600),
                "burst {b}: pods or claims not gone"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        took.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "| {b} | {burst} | {:.1} | {:.0} | {:.0} | {:.0} | {:.1} |",
            ready.as_secs_f64(),
            ms(pct(&took, 0.5)),
            ms(pct(&took, 0.99)),
            ms(pct(&took, 1.0)),
            t1.elapsed().as_secs_f64()
        );
        all.extend(took);
    }
    let wall = run_start.elapsed();
    let [(drss, dcpu), (nrss, ncpu)] = sampler.finish();
    let after = scrape_now(&cluster)?;
    all.sort();
    let q = |b: &[(f64, f64)], a: &[(f64, f64)], p: f64| {
        scrape::quantile(b, a, p).map_or("-".to_string(), |s| format!("{:.1}", s * 1e3))
    };
    println!();
    println!(
        "{} pods in {bursts} bursts of {burst}, {:.0} s",
        all.len(),
        wall.as_secs_f64()
    );
    println!(
        "pod start-up (creation to Ready) over all: p50 {:.0} ms, p99 {:.0} ms",
        pct(&all, 0.5).as_secs_f64() * 1e3,
        pct(&all, 0.99).as_secs_f64() * 1e3
    );
    println!("| | p50 ms | p99 ms |");
    println!("|---|---|---|");
    println!(
        "| NodePrepareResources (graft-driver histogram) | {} | {} |",
        q(&before.prepare, &after.prepare, 0.5),
        q(&before.prepare, &after.prepare, 0.99)
    );
    println!(
        "| NRI CreateContainer (graft-nri histogram) | {} | {} |",
        q(&before.create, &after.create, 0.5),
        q(&before.create, &after.create, 0.99)
    );
    println!("| daemon | peak RSS MiB | CPU s | mean cores over the run |");
    println!("|---|---|---|---|");
    for (name, rss, cpu) in [("graft-driver", drss, dcpu), ("graft-nri", nrss, ncpu)] {
        println!(
            "| {name} | {:.1} | {:.2} | {:.3} |",
            rss as f64 / 1024.0,
            cpu.as_secs_f64(),
            cpu.as_secs_f64() / wall.as_secs_f64()
        );
    }
    drop(clock);
    drop(cluster);
    drop(nodes);
    Ok(())
}
