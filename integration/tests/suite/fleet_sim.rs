//! The fleet simulator's smallest size in CI: 100 simulated GPU nodes (integration/src/fleet)
//! on the testbed's real API server, controller-manager and kube-scheduler, with
//! graft-scheduler-extender behind a second scheduler. The 1,000- and 5,000-node sizes are
//! the `fleet` benchmark (docs/benchmarks.md).

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::ensure;
use graft_integration::fleet::{kubelet::Kubelet, nodes, shapes::Shapes, workload, Fleet};
use graft_integration::scrape;
use graft_integration::testbed::Testbed;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};

const NODES: usize = 100;
/// How long the fleet's nodes may take to be Ready.
const LIMIT: Duration = Duration::from_secs(120);
/// The scheduler name of the profile that calls graft's extender.
const GRAFT_PROFILE: &str = "graft-gpu";

fn scored(metrics: &str) -> f64 {
    let text = scrape::tcp_get(metrics, "/metrics")
        .map(|(_, t)| t)
        .unwrap_or_default();
    scrape::value(
        &text,
        "graft_scheduler_extender_calls_total{verb=\"prioritize\",outcome=\"scored\"}",
    )
    .unwrap_or(0.0)
}

/// Pods of `scheduler` made one after another (each bound before the next), each asking
/// one whole GPU on a plain HGX node; the nodes they were bound to.
async fn one_by_one(
    c: &kube::Client,
    ns: &str,
    scheduler: &str,
    n: usize,
) -> anyhow::Result<Vec<String>> {
    let claims = Api::namespaced(c.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(c.clone(), ns);
    let mut placed = Vec::new();
    for i in 0..n {
        let name = format!("{scheduler}-{i}");
        claims
            .create(
                &PostParams::default(),
                &workload::claim(ns, &name, workload::Ask::Gpus(1))?,
            )
            .await?;
        let mut p = workload::pod(ns, &name, scheduler)?;
        if let Some(s) = p.spec.as_mut() {
            s.node_selector =
                Some([(nodes::POOL_LABEL.to_string(), "hgx-h100".to_string())].into());
        }
        pods.create(&PostParams::default(), &p).await?;
        let start = std::time::Instant::now();
        loop {
            let got = pods.get(&name).await?;
            if let Some(node) = got.spec.and_then(|s| s.node_name) {
                placed.push(node);
                break;
            }
            ensure!(
                start.elapsed() < Duration::from_secs(60),
                "{name} not bound in 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The extender learns of the allocation through its watch: give it a moment
        // before the next pod is scored, as a busy CI machine may delay the event.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(placed)
}

/// A managed control plane takes no extender: graft's scoring then runs in a second
/// kube-scheduler, whose profile pods choose by `schedulerName`. Pods of that profile are
/// scored by the extender and packed onto one node; pods of the default scheduler never
/// reach it. Then a mixed round of the benchmark's pods on 100 nodes is bound by each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extender_on_a_second_scheduler_profile() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let dir = tempfile::Builder::new()
        .prefix("graft-fleet")
        .tempdir_in("/tmp")?;
    let shapes = Shapes::discover(&dir.path().join("shapes"))?;
    let plan = nodes::plan(NODES);
    let (mut fleet, c, slices) =
        Fleet::with_nodes(&tb, &dir.path().join("cp"), &shapes, &plan, LIMIT).await?;
    ensure!(slices >= NODES, "{slices} slices for {NODES} nodes");
    let _kubelet = Kubelet::start(c.clone());
    let ext = fleet.extender(&[])?;
    fleet.scheduler("kube-scheduler", &["default-scheduler"], None)?;
    fleet.scheduler("kube-scheduler-graft", &[GRAFT_PROFILE], Some(&ext.usage))?;

    let ns = "fleet-pack";
    workload::namespace(&c, ns).await?;

    let before = scored(&ext.metrics);
    let default_nodes = one_by_one(&c, ns, "default-scheduler", 4).await?;
    ensure!(
        scored(&ext.metrics) == before,
        "the default scheduler's pods reached the extender"
    );
    let graft_nodes = one_by_one(&c, ns, GRAFT_PROFILE, 6).await?;
    let calls = scored(&ext.metrics) - before;
    ensure!(
        calls >= 5.0,
        "the extender scored {calls} of the second profile's 6 pods"
    );
    let distinct: BTreeSet<&String> = graft_nodes.iter().collect();
    ensure!(
        distinct.len() <= 2,
        "the extender packs: 6 one-GPU pods went to {distinct:?}"
    );
    eprintln!(
        "default scheduler: 4 pods on {:?}; graft profile: 6 pods on {distinct:?}",
        default_nodes.iter().collect::<BTreeSet<_>>()
    );
    // The fleet gauges: 72 HGX boards of 8 GPUs, 10 of them used on the nodes above.
    let series = |name: &str| format!("graft_scheduler_extender_{name}{{pool=\"hgx-h100\"}}");
    let used: BTreeSet<&String> = default_nodes.iter().chain(&graft_nodes).collect();
    let start = std::time::Instant::now();
    loop {
        let text = scrape::tcp_get(&ext.metrics, "/metrics")
            .map(|(_, t)| t)
            .unwrap_or_default();
        let get = |n: &str| scrape::value(&text, &series(n));
        let want_free = 576.0 - 10.0;
        let stranded = (8 * used.len()) as f64 - 10.0;
        if get("gpus") == Some(576.0) && get("free_gpus") == Some(want_free) {
            let ratio = get("fragmentation_ratio").unwrap_or(-1.0);
            ensure!(
                (ratio - stranded / want_free).abs() < 1e-6,
                "fragmentation ratio {ratio}, expected {stranded}/{want_free}"
            );
            break;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(30),
            "the fleet gauges never showed 566 of 576 GPUs free:\n{}",
            text.lines()
                .filter(|l| l.contains("hgx-h100"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    fleet.check()?;

    // The benchmark's mix, a round per scheduler.
    for (i, scheduler) in ["default-scheduler", GRAFT_PROFILE].into_iter().enumerate() {
        let asks = workload::asks(7, 60);
        let ns = format!("fleet-round-{i}");
        let r = workload::round(&c, &ns, scheduler, &asks, Duration::from_secs(120)).await?;
        eprintln!(
            "{scheduler}: {} of {} pods bound in {:.1} s ({:.1} pods/s; created in {:.1} s)",
            r.bound,
            r.pods,
            r.bound_in.as_secs_f64(),
            r.throughput(),
            r.created_in.as_secs_f64()
        );
        if r.bound < r.pods {
            let why = workload::unbound(&c, &ns, 5).await?;
            anyhow::bail!(
                "{scheduler}: {} of {} pods bound; waiting: {why:#?}",
                r.bound,
                r.pods
            );
        }
        let pods: Api<Pod> = Api::namespaced(c.clone(), &ns);
        let running = pods
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        ensure!(running > 0, "the fake kubelet ran none of {ns}'s pods");
        workload::clear(&c, &ns, Duration::from_secs(120)).await?;
    }
    fleet.check()?;
    Ok(())
}

/// A ComputeDomain of a whole NVL72 rack (18 trays) in the 100-node fleet, through the
/// real chain: graft's controller places it in the rack's clique, kube-scheduler allocates
/// each pod a channel and holds it on the channel's binding condition, the DaemonSet
/// controller makes the members' daemon pods, the fake kubelet runs them, and the domain
/// turns Ready and its pods are bound. Deleting it leaves no daemon behind. (The fleet
/// benchmark times the same at 64 and 256 nodes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compute_domain_of_a_rack_in_the_fleet() -> anyhow::Result<()> {
    use graft_integration::fleet::domains;
    let tb = Testbed::load()?;
    let dir = tempfile::Builder::new()
        .prefix("graft-fleet")
        .tempdir_in("/tmp")?;
    let shapes = Shapes::discover(&dir.path().join("shapes"))?;
    let (mut fleet, c, _) = Fleet::with_nodes(
        &tb,
        &dir.path().join("cp"),
        &shapes,
        &nodes::plan(NODES),
        LIMIT,
    )
    .await?;
    let _kubelet = Kubelet::start(c.clone());
    let mut ctl = fleet.cd_controller(&tb)?;
    fleet.scheduler("kube-scheduler", &["default-scheduler"], None)?;

    let ns = "fleet-domain";
    let r = domains::ready(&c, ns, 18, false, Duration::from_secs(120)).await?;
    eprintln!(
        "a domain of 18: placed in {:.1} s, Ready {:.1} s and bound {:.1} s after its pods",
        r.placed_in.as_secs_f64(),
        r.ready_in.as_secs_f64(),
        r.bound_in.as_secs_f64()
    );
    let daemons: Api<Pod> = Api::namespaced(c.clone(), graft_integration::fleet::graft::NAMESPACE);
    let on = domains::nodes_of(&daemons).await?;
    ensure!(
        on.len() == 18 && on.iter().all(|n| n.as_str() < "sim-00018"),
        "daemons on {on:?}, not on the rack's 18 trays"
    );
    domains::clear(&c, ns, Duration::from_secs(120)).await?;
    let start = std::time::Instant::now();
    while !daemons.list(&ListParams::default()).await?.items.is_empty() {
        ensure!(
            start.elapsed() < Duration::from_secs(60),
            "daemon pods left 60 s after the domain was deleted"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    ensure!(ctl.proc.running(), "the controller exited");
    fleet.check()?;
    Ok(())
}

/// The simulated shapes are what graft's discovery makes of the fake node: an HGX board's
/// 8 whole GPUs in two NVLink islands, the MIG board's 8 with one also offered as MIG
/// placements (partitionable: the whole GPU and its placements share counters), and an
/// NVL72 tray's 4 GPUs in its rack's clique with IMEX channels; every slice within the
/// API's limits.
#[test]
fn fleet_shapes_are_what_graft_publishes() -> anyhow::Result<()> {
    use graft_integration::fleet::shapes::Shape;
    let dir = tempfile::Builder::new()
        .prefix("graft-shapes")
        .tempdir_in("/tmp")?;
    let shapes = Shapes::discover(dir.path())?;
    let whole = |shape| {
        shapes
            .devices(shape)
            .iter()
            .filter(|d| d.name.starts_with("gpu-") && !d.name.contains("-mig-"))
            .count()
    };
    let names = |shape| -> Vec<String> {
        shapes
            .devices(shape)
            .iter()
            .map(|d| d.name.clone())
            .collect()
    };
    ensure!(whole(Shape::Hgx) == 8, "HGX: {:?}", names(Shape::Hgx));
    ensure!(names(Shape::Hgx).len() == 8, "HGX: {:?}", names(Shape::Hgx));
    ensure!(
        whole(Shape::HgxMig) == 8,
        "MIG board: {:?}",
        names(Shape::HgxMig)
    );
    ensure!(
        names(Shape::HgxMig)
            .iter()
            .any(|n| n.contains("-mig-3g-40gb")),
        "MIG board: {:?}",
        names(Shape::HgxMig)
    );
    ensure!(
        whole(Shape::Nvl72) == 4,
        "NVL72 tray: {:?}",
        names(Shape::Nvl72)
    );
    ensure!(
        names(Shape::Nvl72)
            .iter()
            .any(|n| n.starts_with("imex-channel-")),
        "NVL72 tray: {:?}",
        names(Shape::Nvl72)
    );
    let islands: BTreeSet<String> = shapes
        .slices(Shape::Hgx, "n", "u", 0)
        .iter()
        .flat_map(|s| s.spec.devices.iter().flatten())
        .filter_map(|d| d.attributes.as_ref()?.get("nvlinkIsland")?.string.clone())
        .collect();
    ensure!(islands.len() == 2, "HGX islands: {islands:?}");
    let cliques = |rack| -> BTreeSet<String> {
        shapes
            .slices(Shape::Nvl72, "n", "u", rack)
            .iter()
            .flat_map(|s| s.spec.devices.iter().flatten())
            .filter_map(|d| d.attributes.as_ref()?.get("cliqueID")?.string.clone())
            .collect()
    };
    ensure!(
        cliques(3).len() == 1 && cliques(3) != cliques(4),
        "{:?} {:?}",
        cliques(3),
        cliques(4)
    );
    Ok(())
}
