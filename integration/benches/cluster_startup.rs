//! Pod start-up on the single-node cluster, side by side: a pod whose container claims a
//! graft device (fuse, injected by graft-nri), a pod that claims a device of the DRA test
//! driver Kubernetes ships for its own end-to-end tests (injected by containerd through
//! CDI), and a pod without a claim. Creation to Ready, timed from the API server's watch
//! events as they arrive (`pod_clock`). The kinds take turns round by round, rotating which
//! goes first; each pod is deleted, and its claim unprepared, before the next starts (the
//! node has one fuse device).
//!
//! Run: `cargo build --release --workspace --bins && cargo bench -p graft-integration --bench cluster_startup`
//! (graft from the release binaries; the test driver is built by
//! `integration/testbed/build-dra-test-driver.sh`). GRAFT_BENCH_ROUNDS: pods of each kind (30).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_integration::bench::pct;
use graft_integration::cluster::Cluster;
use graft_integration::pod_clock::PodClock;
use graft_integration::scrape;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use graft_integration::dra_test_driver::{TestDriver, NAME as TEST_DRIVER};
const LABEL: &str = "graft-bench=startup";

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Plain,
    Graft,
    Cdi,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Graft => "graft",
            Kind::Cdi => "cdi",
        }
    }
    fn template(self) -> Option<&'static str> {
        match self {
            Kind::Plain => None,
            Kind::Graft => Some("bench-graft"),
            Kind::Cdi => Some("bench-cdi"),
        }
    }
}

fn pod(name: &str, kind: Kind) -> anyhow::Result<Pod> {
    let mut spec = json!({
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "app", "image": "docker.io/library/busybox:test",
                        "imagePullPolicy": "Never", "command": ["/bin/sleep", "3600"]}]
    });
    if let Some(t) = kind.template() {
        spec["resourceClaims"] = json!([{"name": "dev", "resourceClaimTemplateName": t}]);
        spec["containers"][0]["resources"] = json!({"claims": [{"name": "dev"}]});
    }
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"graft-bench": "startup"}},
        "spec": spec
    }))?)
}

async fn create<K>(api: &Api<K>, obj: serde_json::Value) -> anyhow::Result<()>
where
    K: kube::Resource
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + k8s_openapi::serde::Serialize
        + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj)?;
    api.create(&PostParams::default(), &obj).await?;
    Ok(())
}

/// Fields drop in this order: the watch ends before the cluster goes.
struct Bench {
    clock: PodClock,
    client: kube::Client,
    cluster: Cluster,
}

impl Bench {
    /// One pod of `kind`: creation to Ready; then deleted, and waited out with its claim.
    async fn start_once(&self, name: &str, kind: Kind) -> anyhow::Result<Duration> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "default");
        let claims: Api<ResourceClaim> = Api::namespaced(self.client.clone(), "default");
        pods.create(&PostParams::default(), &pod(name, kind)?)
            .await?;
        let took = self
            .clock
            .wait_ready(name, Duration::from_secs(120))
            .await
            .with_context(|| self.cluster.dra_state())?;
        pods.delete(name, &DeleteParams::default()).await?;
        // Gone from the API and unprepared: until then graft refuses the only fuse device
        // to the next claim, and the kubelet's retry backoff would be measured instead.
        let prepared = || {
            std::fs::read_dir("/var/lib/graft/claims")
                .map(|d| d.count())
                .unwrap_or(0)
        };
        let start = Instant::now();
        while pods.get_opt(name).await?.is_some()
            || !claims.list(&ListParams::default()).await?.items.is_empty()
            || prepared() != 0
        {
            ensure!(
                start.elapsed() < Duration::from_secs(120),
                "{name} not gone"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(took)
    }

    /// The first pod of each kind proves its injection: the device node for graft, the
    /// CDI spec's variable for the test driver.
    async fn check_injected(&self, name: &str, kind: Kind) -> anyhow::Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "default");
        pods.create(&PostParams::default(), &pod(name, kind)?)
            .await?;
        self.clock
            .wait_ready(name, Duration::from_secs(120))
            .await
            .with_context(|| self.cluster.dra_state())?;
        let spec = self.cluster.runtime_spec(name, "app")?;
        let has_fuse = spec["linux"]["devices"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["path"] == "/dev/fuse"));
        let has_cdi_env = spec["process"]["env"].as_array().is_some_and(|e| {
            e.iter()
                .any(|v| v.as_str().is_some_and(|v| v.starts_with("claim_")))
        });
        match kind {
            Kind::Graft => ensure!(has_fuse && !has_cdi_env, "graft pod: {spec}"),
            Kind::Cdi => ensure!(has_cdi_env && !has_fuse, "CDI pod: {spec}"),
            Kind::Plain => ensure!(!has_fuse && !has_cdi_env, "plain pod: {spec}"),
        }
        pods.delete(name, &DeleteParams::default()).await?;
        while pods.get_opt(name).await?.is_some() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }
}

async fn setup(client: &kube::Client) -> anyhow::Result<()> {
    let classes: Api<DeviceClass> = Api::all(client.clone());
    if classes.get_opt("cdi-test").await?.is_none() {
        create(&classes, json!({
            "metadata": {"name": "cdi-test"},
            "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{TEST_DRIVER}'")}}]}
        }))
        .await?;
    }
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), "default");
    for (name, class) in [("bench-graft", "fuse.graft.dev"), ("bench-cdi", "cdi-test")] {
        if templates.get_opt(name).await?.is_none() {
            create(
                &templates,
                json!({
                    "metadata": {"name": name, "namespace": "default"},
                    "spec": {"spec": {"devices": {"requests": [
                        {"name": "dev", "exactly": {"deviceClassName": class}}]}}}
                }),
            )
            .await?;
        }
    }
    // The test driver has published its devices.
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let lp = ListParams::default().fields(&format!("spec.driver={TEST_DRIVER}"));
    let start = Instant::now();
    while slices.list(&lp).await?.items.is_empty() {
        ensure!(
            start.elapsed() < Duration::from_secs(60),
            "the DRA test driver published no ResourceSlice"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

fn row(kind: &str, v: &mut [Duration]) -> String {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean = v.iter().map(|d| ms(*d)).sum::<f64>() / v.len() as f64;
    format!(
        "| {kind} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
        v.len(),
        ms(pct(v, 0.5)),
        ms(pct(v, 0.9)),
        ms(pct(v, 1.0)),
        mean
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::var("GRAFT_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let release = top.join("target/release");
    ensure!(
        release.join("graft-driver").exists() && release.join("graft-nri").exists(),
        "build graft first: cargo build --release --workspace --bins"
    );
    let cluster = Cluster::up_with(&release, None)?;
    let client = cluster.client().await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes
        .list(&ListParams::default())
        .await?
        .items
        .first()
        .and_then(|n| n.metadata.name.clone())
        .context("no node")?;
    let log = top.join("target/dra-test-driver.log");
    std::fs::create_dir_all(format!("/var/lib/kubelet/plugins/{TEST_DRIVER}"))?;
    let driver = TestDriver::start(&cluster.kubeconfig, &node, ["--num-devices", "8"], &log)?;
    setup(&client).await?;
    let clock = PodClock::start(client.clone(), "default", LABEL).await?;
    let bench = Bench {
        clock,
        client,
        cluster,
    };

    let kinds = [Kind::Plain, Kind::Graft, Kind::Cdi];
    for k in kinds {
        bench
            .check_injected(&format!("check-{}", k.name()), k)
            .await
            .with_context(|| format!("test driver log: {}", log.display()))?;
    }
    let prepare = || -> anyhow::Result<Vec<(f64, f64)>> {
        let (_, m) = scrape::tcp_get(&bench.cluster.metrics_addr(9477)?, "/metrics")?;
        let name = "graft_driver_prepare_duration_seconds";
        Ok(scrape::buckets(&m, name, "result=\"ok\""))
    };
    let before = prepare()?;
    let mut took: [Vec<Duration>; 3] = Default::default();
    for i in 0..rounds {
        for j in 0..3 {
            let k = (i + j) % 3;
            let name = format!("{}-{i}", kinds[k].name());
            took[k].push(bench.start_once(&name, kinds[k]).await.context(name)?);
        }
    }

    let after = prepare()?;
    let p50 = |v: &mut Vec<Duration>| {
        v.sort();
        pct(v, 0.5).as_secs_f64()
    };
    let (plain, graft, cdi) = (
        p50(&mut took[0].clone()),
        p50(&mut took[1].clone()),
        p50(&mut took[2].clone()),
    );
    println!("pod creation to Ready (watch events), {rounds} pods of each kind, taking turns");
    println!("| pod | pods | p50 ms | p90 ms | max ms | mean ms |");
    println!("|---|---|---|---|---|---|");
    println!("{}", row("no claim", &mut took[0]));
    println!("{}", row("graft claim (fuse, NRI)", &mut took[1]));
    println!("{}", row("DRA test driver claim (CDI)", &mut took[2]));
    println!(
        "median ratios: graft/no claim {:.2}, CDI driver/no claim {:.2}, graft/CDI driver {:.2}",
        graft / plain,
        cdi / plain,
        graft / cdi
    );
    let q = |p| scrape::quantile(&before, &after, p).map_or(f64::NAN, |s| s * 1e3);
    println!(
        "graft-driver NodePrepareResources over the rounds (its histogram): p50 {:.1} ms, p99 {:.1} ms",
        q(0.5),
        q(0.99)
    );
    // The plugin goes before the cluster it is registered with.
    drop(driver);
    drop(bench);
    Ok(())
}
