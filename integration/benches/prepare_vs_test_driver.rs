//! One-claim NodePrepareResources on a slow-flush disk: graft-driver against the DRA test
//! driver Kubernetes uses in its own end-to-end tests (k8s.io/kubernetes/test/e2e/dra/
//! test-driver, which writes a CDI file per claim), side by side in one run.
//!
//! Each side keeps its state on a disk of its own: ext4 on a loop device limited to
//! GRAFT_BENCH_IOPS (200) write IOs per second (`bench::slow_disk`), graft-driver's state
//! directory (with containerd 2.2 and graft-nri beside it, whose status gates every
//! prepare) and the test driver's CDI directory. With GRAFT_BENCH_BEFORE_DRIVER=<binary>, a
//! third side runs that graft-driver build (one from before its prepare path stopped
//! syncing) on a disk of its own too.
//!
//! A round makes a claim and its pod for every side (untimed), then times one
//! NodePrepareResources per side in a rotating order, sent as the kubelet sends it over the
//! plugin's socket (the driver reads the claim from the API server), then unprepares each
//! (untimed). Ratios are of one quantile over the same rounds, with a bootstrap interval
//! that resamples rounds. Every call goes to target/bench-samples.
//!
//! Run: `cargo build --release -p graft-driver -p graft-nri && cargo bench -p
//! graft-integration --bench prepare_vs_test_driver` (root; cgroup v1's blkio controller).
//! GRAFT_BENCH_ROUNDS: timed rounds (200).
//!
//! Each round the bench also reads graft's claim and pod itself, with the client library
//! graft-driver uses, to say what the pod GET that graft makes and the test driver does not
//! costs at the API server: the claim, the pod decoded, the pod as text only, and the pod
//! from the server's watch cache (`resourceVersion=0`, as graft-driver reads a pod first).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_integration::apiserver::{self, ControlPlane};
use graft_integration::bench::paired::{quantile, quantile_estimate, ratio};
use graft_integration::bench::samples::Samples;
use graft_integration::bench::slow_disk::SlowDisk;
use graft_integration::claims::{allocated_claim_of, claim_msg, namespace, pod_on};
use graft_integration::dra_node::{DraNode, DRIVER_NAME};
use graft_integration::dra_test_driver::{self, TestDriver, NAME as TEST_DRIVER};
use graft_integration::unix::unix_channel;
use graft_proto::dra::v1;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, GetParams, PostParams};
use serde_json::json;
use tonic::transport::Channel;

const NS: &str = "bench-slow";
const WARMUP: usize = 10;
const DISK_MIB: u64 = 256;

type Dra = v1::dra_plugin_client::DraPluginClient<Channel>;

/// One side: a driver on its own disk and node, and how its claims are allocated.
struct Side {
    label: &'static str,
    node: String,
    driver: &'static str,
    device: &'static str,
    dra: Dra,
    /// graft-driver's log, whose NodePrepareResources lines split a call into its API reads
    /// and its local work.
    log: Option<PathBuf>,
    /// Kept for their drops: the driver's processes, then its disk.
    _graft: Option<DraNode>,
    _test: Option<TestDriver>,
    _disk: SlowDisk,
}

impl Side {
    async fn graft(
        cp: &ControlPlane,
        label: &'static str,
        dir: &Path,
        iops: u32,
        args: &[&str],
        bin: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let disk = SlowDisk::new(dir, DISK_MIB, iops)?;
        let state = disk.path().join("graft");
        let toml = "[[devices]]\npath = \"/dev/null\"\n";
        let node = format!(
            "slow-{}",
            label.to_lowercase().replace([' ', '(', ')'], "-")
        );
        let n = DraNode::start_on_dir(cp, &node, toml, args, &state, bin).await?;
        Ok(Side {
            label,
            node,
            driver: DRIVER_NAME,
            device: "null",
            dra: n.dra().await?,
            log: Some(n.path("logs/graft-driver.log")),
            _graft: Some(n),
            _test: None,
            _disk: disk,
        })
    }

    async fn test_driver(
        cp: &ControlPlane,
        node: &str,
        dir: &Path,
        iops: u32,
    ) -> anyhow::Result<Self> {
        let disk = SlowDisk::new(dir, DISK_MIB, iops)?;
        let nodes: Api<Node> = Api::all(cp.client().await?);
        if nodes.get_opt(node).await?.is_none() {
            let mut n = Node::default();
            n.metadata.name = Some(node.to_string());
            nodes.create(&PostParams::default(), &n).await?;
        }
        let plugins = dir.join("plugins");
        std::fs::create_dir_all(plugins.join(TEST_DRIVER))?;
        let cdi = disk.path().join("cdi");
        let args = [
            "--num-devices".as_ref(),
            "1".as_ref(),
            "--cdi-dir".as_ref(),
            cdi.as_os_str(),
            "--datadir".as_ref(),
            plugins.as_os_str(),
            "--plugin-registration-path".as_ref(),
            dir.as_os_str(),
        ];
        let log = dir.join("dra-test-driver.log");
        let t = TestDriver::start(&cp.kubeconfig, node, args, &log)?;
        let sock = dra_test_driver::socket(&plugins);
        let t0 = Instant::now();
        while !sock.exists() {
            ensure!(
                t0.elapsed() < Duration::from_secs(30),
                "{} never appeared; the test driver logged:\n{}",
                sock.display(),
                std::fs::read_to_string(dir.join("dra-test-driver.log")).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Side {
            label: "dra-test-driver",
            node: node.into(),
            driver: TEST_DRIVER,
            device: "device-00",
            dra: v1::dra_plugin_client::DraPluginClient::new(unix_channel(&sock).await?),
            log: None,
            _graft: None,
            _test: Some(t),
            _disk: disk,
        })
    }

    /// A claim on this side's device and its pod, named for round `r`.
    async fn claim(&self, client: &kube::Client, r: usize) -> anyhow::Result<v1::Claim> {
        let name = format!("{}-{r}", self.node);
        let pod = pod_on(
            client,
            NS,
            &name,
            Some(&self.node),
            &[("d", &name)],
            &[("c", &[("d", "")])],
        )
        .await?;
        let c = allocated_claim_of(
            client,
            self.driver,
            NS,
            &name,
            &self.node,
            &[("r", self.device)],
            json!([]),
            &[&pod],
        )
        .await?;
        Ok(claim_msg(&c))
    }

    /// One timed NodePrepareResources (µs).
    async fn prepare(&mut self, c: &v1::Claim) -> anyhow::Result<f64> {
        let t = Instant::now();
        let r = self
            .dra
            .node_prepare_resources(v1::NodePrepareResourcesRequest {
                claims: vec![c.clone()],
            })
            .await?
            .into_inner();
        let us = t.elapsed().as_secs_f64() * 1e6;
        let out = r.claims.get(&c.uid).context("no answer for the claim")?;
        ensure!(out.error.is_empty(), "{}: {}", self.label, out.error);
        Ok(us)
    }

    async fn unprepare(&mut self, c: &v1::Claim) -> anyhow::Result<()> {
        let r = self
            .dra
            .node_unprepare_resources(v1::NodeUnprepareResourcesRequest {
                claims: vec![c.clone()],
            })
            .await?
            .into_inner();
        let err = r
            .claims
            .get(&c.uid)
            .map(|e| e.error.clone())
            .unwrap_or_default();
        ensure!(err.is_empty(), "{}: unprepare: {err}", self.label);
        Ok(())
    }
}

/// The medians of graft-driver's logged API reads and local work, over the last `n` calls.
fn logged_split(log: &Path, n: usize) -> Option<(f64, f64)> {
    let text = std::fs::read_to_string(log).ok()?;
    let field = |l: &str, k: &str| -> Option<f64> {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
    };
    let calls: Vec<(f64, f64)> = text
        .lines()
        .filter(|l| l.contains("NodePrepareResources"))
        .filter_map(|l| Some((field(l, "fetch_us=")?, field(l, "local_us=")?)))
        .collect();
    let last = &calls[calls.len().saturating_sub(n)..];
    let mut fetch: Vec<f64> = last.iter().map(|c| c.0).collect();
    let mut local: Vec<f64> = last.iter().map(|c| c.1).collect();
    Some((quantile(&mut fetch, 0.5), quantile(&mut local, 0.5)))
}

/// The bench's own reads of one claim and its pod (µs): the claim, the pod decoded into
/// k8s-openapi's `Pod` (as graft-driver reads it), and the pod's bytes only. The order
/// rotates with the round.
async fn reads(client: &kube::Client, name: &str, r: usize) -> anyhow::Result<[f64; 4]> {
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut us = [0.0; 4];
    for k in 0..4 {
        let i = (r + k) % 4;
        let t = Instant::now();
        match i {
            0 => drop(claims.get(name).await?),
            1 => drop(pods.get(name).await?),
            2 => drop(pods.get_with(name, &GetParams::any()).await?),
            _ => {
                let req = kube::core::Request::new(format!("/api/v1/namespaces/{NS}/pods"))
                    .get(name, &GetParams::default())?;
                drop(client.request_text(req).await?)
            }
        }
        us[i] = t.elapsed().as_secs_f64() * 1e6;
    }
    Ok(us)
}

fn report_reads(reads: &[[f64; 4]]) {
    let col = |i: usize| reads.iter().map(|r| r[i]).collect::<Vec<f64>>();
    let (claim, pod, cached, text) = (col(0), col(1), col(2), col(3));
    println!(
        "the bench's own reads, p50: claim GET {:.0} µs, pod GET {:.0} µs (decoded as graft does), pod GET from the watch cache {:.0} µs, pod GET as text {:.0} µs; pod / claim {:.2}, watch cache / quorum {:.2}, decoded / text {:.2}",
        quantile_estimate(&claim, 0.5),
        quantile_estimate(&pod, 0.5),
        quantile_estimate(&cached, 0.5),
        quantile_estimate(&text, 0.5),
        ratio(&pod, &claim, 0.5),
        ratio(&cached, &pod, 0.5),
        ratio(&pod, &text, 0.5)
    );
}

fn report(sides: &[Side], times: &[Vec<f64>]) {
    let test = sides
        .iter()
        .position(|s| s.driver == TEST_DRIVER)
        .unwrap_or(0);
    for (s, t) in sides.iter().zip(times) {
        println!(
            "{:<24} p50 {:.0} µs, p90 {:.0} µs",
            s.label,
            quantile_estimate(t, 0.5),
            quantile_estimate(t, 0.9)
        );
    }
    for (s, t) in sides.iter().zip(times) {
        if let Some((fetch, local)) = s.log.as_deref().and_then(|l| logged_split(l, t.len())) {
            println!(
                "{}: as it logged its calls, median API reads {fetch:.0} µs, local work {local:.0} µs",
                s.label
            );
        }
    }
    for (i, s) in sides.iter().enumerate().filter(|(i, _)| *i != test) {
        println!(
            "{} / {}: p50 {:.2}, p90 {:.2}",
            s.label,
            sides[test].label,
            ratio(&times[i], &times[test], 0.5),
            ratio(&times[i], &times[test], 0.9)
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::var("GRAFT_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let iops: u32 = std::env::var("GRAFT_BENCH_IOPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let before = std::env::var_os("GRAFT_BENCH_BEFORE_DRIVER").map(PathBuf::from);
    let cp = apiserver::shared()?;
    let client = cp.client().await?;
    namespace(&client, NS).await?;
    let dirs: Vec<tempfile::TempDir> = (0..4)
        .map(|_| tempfile::Builder::new().prefix("sd").tempdir_in("/tmp"))
        .collect::<Result<_, _>>()?;
    let d = |i: usize| dirs[i].path();
    let mut sides = vec![
        Side::graft(cp, "graft-driver", d(0), iops, &[], None).await?,
        Side::test_driver(cp, "slow-test", d(1), iops).await?,
        Side::graft(
            cp,
            "graft-driver podCache",
            d(2),
            iops,
            &["--pod-cache"],
            None,
        )
        .await?,
    ];
    if let Some(b) = &before {
        let label = "graft-driver before";
        sides.push(Side::graft(cp, label, d(3), iops, &[], Some(b)).await?);
    }
    println!(
        "One-claim NodePrepareResources, each driver's state on a loop device throttled to {iops} write IOs/s; {rounds} rounds after {WARMUP} warm-up, rotating order."
    );
    let mut samples = Samples::create("prepare_vs_test_driver", &["round", "side", "us"])?;
    let mut times = vec![Vec::new(); sides.len()];
    let mut own_reads = Vec::new();
    for r in 0..WARMUP + rounds {
        let mut claims = Vec::new();
        for s in &sides {
            claims.push(s.claim(&client, r).await?);
        }
        for k in 0..sides.len() {
            let i = (r + k) % sides.len();
            let us = sides[i].prepare(&claims[i]).await?;
            if r >= WARMUP {
                times[i].push(us);
                samples.row(&[
                    (r - WARMUP).to_string(),
                    sides[i].label.replace(' ', "_"),
                    format!("{us:.0}"),
                ])?;
            }
        }
        let read = reads(&client, &format!("{}-{r}", sides[0].node), r).await?;
        if r >= WARMUP {
            own_reads.push(read);
        }
        for (s, c) in sides.iter_mut().zip(&claims) {
            s.unprepare(c).await?;
        }
    }
    println!("samples: {}", samples.finish()?.display());
    report(&sides, &times);
    report_reads(&own_reads);
    Ok(())
}
