//! Pods for the fleet, shaped like kube-scheduler's own DRA benchmark (scheduler_perf's
//! DRA configs: pods each with a claim, created in bulk, throughput counted as pods bound
//! per second) and like graft's placement churn: 1, 2, 4 and 8 whole GPUs, and MIG
//! instances, in a seeded mix.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::json;

/// Creations in flight.
const IN_FLIGHT: usize = 16;

/// What a pod asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// Whole GPUs.
    Gpus(u32),
    /// One MIG instance of this profile.
    Mig(&'static str),
}

/// SplitMix64: the same stream for every variant and run of a seed.
pub struct Rng(pub u64);

impl Rng {
    /// A number in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `n` asks of seed `seed`, in the placement benchmark's proportions.
pub fn asks(seed: u64, n: usize) -> Vec<Ask> {
    let mut rng = Rng(seed);
    (0..n)
        .map(|_| match rng.uniform() {
            r if r < 0.40 => Ask::Gpus(1),
            r if r < 0.60 => Ask::Gpus(2),
            r if r < 0.72 => Ask::Gpus(4),
            r if r < 0.82 => Ask::Gpus(8),
            r if r < 0.92 => Ask::Mig("1g.10gb"),
            _ => Ask::Mig("3g.40gb"),
        })
        .collect()
}

/// The claim of `ask`; a multi-GPU request wants one NVLink island when it fits one (4
/// GPUs or fewer), as a user of graft's islands writes it.
pub fn claim(ns: &str, name: &str, ask: Ask) -> anyhow::Result<ResourceClaim> {
    let request = match ask {
        Ask::Gpus(n) => json!({"name": "gpu", "exactly": {
            "deviceClassName": "gpu.graft.dev", "allocationMode": "ExactCount", "count": n}}),
        Ask::Mig(p) => json!({"name": "gpu", "exactly": {"deviceClassName": "mig.graft.dev",
            "selectors": [{"cel": {"expression": format!("device.attributes[\"graft.dev\"].profile == \"{p}\"")}}]}}),
    };
    let constraints = match ask {
        Ask::Gpus(n) if (2..=4).contains(&n) => {
            json!([{"requests": ["gpu"], "matchAttribute": "graft.dev/nvlinkIsland"}])
        }
        _ => json!([]),
    };
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": [request], "constraints": constraints}},
    }))?)
}

/// A pod of `scheduler` using claim `name` (of the same name).
pub fn pod(ns: &str, name: &str, scheduler: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
            "containers": [{"name": "app", "image": "registry.invalid/sim:1",
                "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }))?)
}

/// What one round saw.
#[derive(Debug, Clone)]
pub struct Round {
    /// Pods created.
    pub pods: usize,
    /// Pods bound before the limit.
    pub bound: usize,
    /// From the first pod's creation to the last one's.
    pub created_in: Duration,
    /// From the first pod's creation to the last binding.
    pub bound_in: Duration,
}

impl Round {
    /// Pods bound per second.
    pub fn throughput(&self) -> f64 {
        self.bound as f64 / self.bound_in.as_secs_f64().max(1e-9)
    }
}

/// Creates each of `objects` through `api`, [`IN_FLIGHT`] at a time; the first error.
pub async fn create_all<K>(
    api: &Api<K>,
    objects: impl Iterator<Item = anyhow::Result<K>>,
) -> anyhow::Result<()>
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::Serialize
        + k8s_openapi::serde::de::DeserializeOwned,
{
    futures::stream::iter(objects)
        .map(|o| async move {
            api.create(&PostParams::default(), &o?).await?;
            anyhow::Ok(())
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Makes namespace `ns` and waits for its default ServiceAccount, which admission wants
/// before any pod.
pub async fn namespace(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let nss: Api<Namespace> = Api::all(client.clone());
    let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    nss.create(&PostParams::default(), &n)
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), ns);
    let start = Instant::now();
    while sas.get_opt("default").await?.is_none() {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(60),
            "no default ServiceAccount in {ns}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Makes namespace `ns`, the claims of `asks`, then their pods for `scheduler`, and
/// waits up to `limit` for every pod to be bound.
pub async fn round(
    client: &kube::Client,
    ns: &str,
    scheduler: &str,
    asks: &[Ask],
    limit: Duration,
) -> anyhow::Result<Round> {
    namespace(client, ns).await?;
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), ns);
    let made = asks.iter().enumerate();
    create_all(
        &claims,
        made.map(|(i, a)| claim(ns, &format!("p{i:05}"), *a)),
    )
    .await?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    // Bindings are counted from a watch started before the first pod.
    let watch = watcher(pods.clone(), watcher::Config::default()).applied_objects();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watching = tokio::spawn(async move {
        let mut watch = std::pin::pin!(watch);
        while let Some(Ok(p)) = watch.next().await {
            if let (Some(name), Some(_)) = (p.metadata.name, p.spec.and_then(|s| s.node_name)) {
                if tx.send((name, Instant::now())).is_err() {
                    return;
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t0 = Instant::now();
    create_all(
        &pods,
        (0..asks.len()).map(|i| pod(ns, &format!("p{i:05}"), scheduler)),
    )
    .await?;
    let created_in = t0.elapsed();
    let mut bound: BTreeMap<String, Instant> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + limit;
    while bound.len() < asks.len() {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some((name, at))) => {
                bound.entry(name).or_insert(at);
            }
            _ => break,
        }
    }
    watching.abort();
    let last = bound.values().max().copied().unwrap_or(t0);
    Ok(Round {
        pods: asks.len(),
        bound: bound.len(),
        created_in,
        bound_in: last.saturating_duration_since(t0),
    })
}

/// Makes namespace `ns` with `n` one-GPU claims no pod uses (they stay unallocated).
pub async fn claims_at_rest(client: &kube::Client, ns: &str, n: usize) -> anyhow::Result<()> {
    let nss: Api<Namespace> = Api::all(client.clone());
    let nsobj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    nss.create(&PostParams::default(), &nsobj)
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), ns);
    create_all(
        &claims,
        (0..n).map(|i| claim(ns, &format!("c{i:06}"), Ask::Gpus(1))),
    )
    .await?;
    Ok(())
}

/// Why the pods of `ns` that are not bound wait: `name: message` of their PodScheduled
/// condition, at most `max` of them.
pub async fn unbound(client: &kube::Client, ns: &str, max: usize) -> anyhow::Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(pods
        .list(&kube::api::ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
        .take(max)
        .map(|p| {
            let why = p
                .status
                .and_then(|s| s.conditions)
                .into_iter()
                .flatten()
                .find(|c| c.type_ == "PodScheduled")
                .and_then(|c| c.message)
                .unwrap_or_default();
            format!("{}: {why}", p.metadata.name.unwrap_or_default())
        })
        .collect())
}

/// Waits until `api` lists nothing, up to `limit` after `start`.
async fn wait_empty<K>(
    api: &Api<K>,
    what: &str,
    start: Instant,
    limit: Duration,
) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + k8s_openapi::serde::de::DeserializeOwned,
{
    let one = kube::api::ListParams::default().limit(1);
    while !api.list_metadata(&one).await?.items.is_empty() {
        anyhow::ensure!(
            start.elapsed() < limit,
            "{what} still there after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// Deletes the pods of namespace `ns` (at once: no kubelet waits for them) and then its
/// claims, waiting up to `limit` for each to be gone, then the namespace (not waited for:
/// the namespace controller backs off between its passes).
pub async fn clear(client: &kube::Client, ns: &str, limit: Duration) -> anyhow::Result<()> {
    let start = Instant::now();
    let all = kube::api::ListParams::default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let _ = pods.delete_collection(&now, &all).await?;
    wait_empty(&pods, &format!("pods of {ns}"), start, limit).await?;
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), ns);
    let _ = claims
        .delete_collection(&DeleteParams::default(), &all)
        .await?;
    wait_empty(&claims, &format!("claims of {ns}"), start, limit).await?;
    let nss: Api<Namespace> = Api::all(client.clone());
    let _ = nss.delete(ns, &DeleteParams::default()).await;
    Ok(())
}
