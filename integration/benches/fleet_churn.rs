//! GPU placement under churn at the fleet simulator's scale (integration/src/fleet): the
//! placement bench's seeded stream of pods (1, 2, 4 or 8 whole GPUs or a MIG instance,
//! arriving as a Poisson stream, each running its time and then deleted) on N simulated
//! nodes, run once by the default scheduler and once by the profile that calls
//! graft-scheduler-extender, per seed; then the same stream replayed by the ideal scheduler
//! (`placement/model.rs`) on the same nodes: the bound on what node choice alone can do.
//! The figures are the placement bench's (stranded-capacity waits, time pending, small
//! pods' time pending), so the rows read alike; the default scheduler's row is the peer.
//!
//! Run (the testbed; not part of CI): `cargo build --release -p graft-scheduler-extender &&
//! GRAFT_FLEET_BINS=target/release cargo bench --profile dev -p graft-integration --bench
//! fleet_churn`. GRAFT_CHURN_NODES (100), GRAFT_CHURN_SEEDS (1,2,3), GRAFT_CHURN_PODS (600),
//! GRAFT_CHURN_RUN_S (a pod runs between this and twice this, 30), GRAFT_CHURN_LOAD
//! (whole-GPU demand over the fleet's whole GPUs while pods arrive, in percent, 80).

#[allow(dead_code)] // bench_nodes: the four testbed nodes
#[path = "placement/model.rs"]
mod model;
#[path = "placement/seen.rs"]
mod seen;
#[allow(dead_code)]
#[path = "placement/stream.rs"]
mod stream;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use graft_integration::fleet::kubelet::Kubelet;
use graft_integration::fleet::{self, nodes, shapes::Shapes, workload, Fleet};
use graft_integration::testbed::Testbed;
use graft_scheduler_extender::state;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use seen::{figures, Seen, TICK};
use stream::{env_or, stream, Ask, Job};

const GRAFT_PROFILE: &str = "graft-gpu";
const DRIVER: &str = graft_api::DRIVER;

fn ask(a: Ask) -> workload::Ask {
    match a {
        Ask::Gpus(n) => workload::Ask::Gpus(n),
        Ask::Mig(p) => workload::Ask::Mig(p),
    }
}

/// A store of `api`'s objects kept by a watch, and the task that keeps it (aborted on drop).
struct Watched<K: kube::Resource<DynamicType = ()> + 'static> {
    store: Store<K>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> Watched<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    async fn start(api: Api<K>) -> anyhow::Result<Self> {
        let (store, w) = reflector::store();
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(w);
        let task = tokio::spawn(async move {
            stream.for_each(|_| async {}).await;
        });
        store.wait_until_ready().await?;
        Ok(Watched { store, task })
    }
}

impl<K: kube::Resource<DynamicType = ()> + 'static> Drop for Watched<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One variant over the whole stream, in namespace `ns`, by `scheduler`.
async fn run(
    c: &kube::Client,
    ns: &str,
    scheduler: &str,
    jobs: &[Job],
    slices: &[ResourceSlice],
) -> anyhow::Result<Vec<Seen>> {
    workload::namespace(c, ns).await?;
    let claims: Api<ResourceClaim> = Api::namespaced(c.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(c.clone(), ns);
    let claim_cache = Watched::start(claims.clone()).await?;
    let pod_cache = Watched::start(pods.clone()).await?;
    let islands: BTreeMap<(String, String), String> = slices
        .iter()
        .flat_map(|s| {
            s.spec.devices.iter().flatten().filter_map(|d| {
                let island = d.attributes.as_ref()?.get(state::ISLAND)?.string.clone()?;
                Some(((s.spec.pool.name.clone(), d.name.clone()), island))
            })
        })
        .collect();
    let index: BTreeMap<&str, usize> = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| (j.name.as_str(), i))
        .collect();
    let mut seen: Vec<Seen> = jobs.iter().map(|_| Seen::default()).collect();
    let t0 = Instant::now();
    let limit = jobs.last().map_or(Duration::ZERO, |j| j.arrive) + Duration::from_secs(900);
    let mut next = 0;
    let gone = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    while seen.iter().any(|s| s.finished.is_none()) {
        anyhow::ensure!(
            t0.elapsed() < limit,
            "{ns}: the stream did not finish within {limit:?}"
        );
        let tick = Instant::now();
        let mut arriving = Vec::new();
        while next < jobs.len() && jobs[next].arrive <= t0.elapsed() {
            seen[next].created = Some(Instant::now());
            arriving.push(&jobs[next]);
            next += 1;
        }
        futures::future::try_join_all(arriving.into_iter().map(|j| {
            let (claims, pods) = (claims.clone(), pods.clone());
            async move {
                claims
                    .create(
                        &PostParams::default(),
                        &workload::claim(ns, &j.name, ask(j.ask))?,
                    )
                    .await?;
                pods.create(
                    &PostParams::default(),
                    &workload::pod(ns, &j.name, scheduler)?,
                )
                .await?;
                anyhow::Ok(())
            }
        }))
        .await?;
        let now = Instant::now();
        for p in pod_cache.store.state() {
            let Some(&i) = p.metadata.name.as_deref().and_then(|n| index.get(n)) else {
                continue;
            };
            if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                && seen[i].scheduled.is_none()
            {
                seen[i].scheduled = Some(now);
            }
        }
        let held = claim_cache.store.state();
        let mut done = Vec::new();
        for (i, s) in seen.iter_mut().enumerate() {
            let Some(at) = s.scheduled else { continue };
            if matches!(jobs[i].ask, Ask::Gpus(n) if n > 1) && s.one_island.is_none() {
                s.one_island = held
                    .iter()
                    .find(|c| c.metadata.name.as_deref() == Some(&jobs[i].name))
                    .and_then(|c| {
                        seen::one_island(c, |pool, device| {
                            islands
                                .get(&(pool.to_string(), device.to_string()))
                                .cloned()
                        })
                    });
            }
            if s.finished.is_none() && now.duration_since(at) >= jobs[i].run {
                s.finished = Some(now);
                done.push(jobs[i].name.as_str());
            }
        }
        let nodes = state::nodes(DRIVER, slices, held.iter().map(|c| &**c));
        let free: usize = nodes.values().map(|n| n.free()).sum();
        let most: usize = nodes.values().map(|n| n.free()).max().unwrap_or(0);
        for (i, s) in seen.iter_mut().enumerate() {
            if s.created.is_some() {
                s.tick(jobs[i].ask, free, most);
            }
        }
        futures::future::try_join_all(done.into_iter().map(|name| {
            let (claims, pods, gone) = (claims.clone(), pods.clone(), gone.clone());
            async move {
                pods.delete(name, &gone).await?;
                claims.delete(name, &DeleteParams::default()).await?;
                anyhow::Ok(())
            }
        }))
        .await?;
        tokio::time::sleep(TICK.saturating_sub(tick.elapsed())).await;
    }
    workload::clear(c, ns, Duration::from_secs(300)).await?;
    Ok(seen)
}

fn main() -> anyhow::Result<()> {
    let size = env_or("GRAFT_CHURN_NODES", 100) as usize;
    let seeds: Vec<u64> = std::env::var("GRAFT_CHURN_SEEDS")
        .unwrap_or_else(|_| "1,2,3".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let pods = env_or("GRAFT_CHURN_PODS", 600) as usize;
    let run_s = Duration::from_secs(env_or("GRAFT_CHURN_RUN_S", 30));
    let load = env_or("GRAFT_CHURN_LOAD", 80) as f64 / 100.0;
    let tb = Testbed::load()?;
    let root = tempfile::Builder::new()
        .prefix("graft-churn")
        .tempdir_in("/tmp")?;
    let shapes = Shapes::discover(&root.path().join("shapes"))?;
    fleet::runtime()?.block_on(async {
        let plan = nodes::plan(size);
        let limit = Duration::from_secs(300);
        let (mut fleet, c, _) =
            Fleet::with_nodes(&tb, &root.path().join("cp"), &shapes, &plan, limit).await?;
        let _kubelet = Kubelet::start(c.clone());
        let ext = fleet.extender(&[])?;
        fleet.scheduler("kube-scheduler", &["default-scheduler"], None)?;
        fleet.scheduler("kube-scheduler-graft", &[GRAFT_PROFILE], Some(&ext.usage))?;
        let slices: Vec<ResourceSlice> = Api::<ResourceSlice>::all(c.clone())
            .list(&ListParams::default())
            .await?
            .items;
        let model_nodes: Vec<_> = state::nodes(DRIVER, &slices, []).into_values().collect();
        let whole: usize = model_nodes.iter().map(|n| n.gpus.len()).sum();
        // Whole GPUs a pod asks on average (the stream's mix), and a mean run of 1.5 x.
        let per_pod = 0.40 + 0.20 * 2.0 + 0.12 * 4.0 + 0.10 * 8.0;
        let gap = run_s.mul_f64(1.5 * per_pod / (load * whole as f64));
        for seed in &seeds {
            let jobs = stream(*seed, pods, gap, run_s);
            let mut rows = Vec::new();
            // Alternate which goes first, so that neither always meets a fresher fleet.
            let mut order = [("default-scheduler", "default"), (GRAFT_PROFILE, "extender")];
            if seed % 2 == 0 {
                order.reverse();
            }
            for (scheduler, name) in order {
                eprintln!("[fleet churn] seed {seed}, {name}: {} pods", jobs.len());
                let ns = format!("churn-{seed}-{name}");
                let seen = run(&c, &ns, scheduler, &jobs, &slices).await?;
                rows.push((name, figures(&jobs, &seen, whole as u32)));
                fleet.check()?;
            }
            rows.sort_by_key(|(name, _)| *name);
            println!(
                "\n### seed {seed}: {} pods on {size} simulated nodes ({whole} whole GPUs), a pod every {:.0} ms, runs {}-{} s\n",
                jobs.len(),
                gap.as_secs_f64() * 1000.0,
                run_s.as_secs(),
                2 * run_s.as_secs()
            );
            seen::print(&rows);
            model::print(&jobs, model_nodes.clone());
        }
        anyhow::Ok(())
    })
}
