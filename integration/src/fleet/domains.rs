//! ComputeDomains at fleet scale: a domain of N nodes brought to Ready by the real chain
//! (graft's controller places it and makes its template and DaemonSet, kube-scheduler
//! allocates each pod's IMEX channel and holds the pod on the channel's binding condition,
//! the DaemonSet controller makes a daemon pod on each member, the fake kubelet runs it,
//! the controller sees the daemons Ready, marks the domain Ready and releases the binding
//! conditions), timed from the creation of its pods, as NVIDIA's users time theirs.

use std::time::{Duration, Instant};

use anyhow::Context;
use graft_api::compute_domain::{ComputeDomain, Readiness, CLIQUE_LABEL};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use super::workload;

/// The domain's channel template.
const TEMPLATE: &str = "channel";

/// What one domain's run saw.
#[derive(Debug, Clone)]
pub struct DomainRun {
    /// Its `numNodes`, and the pods made for it (one per node).
    pub nodes: usize,
    /// Whether its pods selected its clique's nodes (the clique label, [`ready`]).
    pub pinned: bool,
    /// From the domain's creation to its template (the controller placed it).
    pub placed_in: Duration,
    /// From the first pod's creation to the last one's.
    pub created_in: Duration,
    /// From the first pod's creation to the domain's status Ready.
    pub ready_in: Duration,
    /// From the first pod's creation to the last pod bound.
    pub bound_in: Duration,
}

/// A workload pod of the domain: its channel claim from the domain's template, and one pod
/// a node (the domain's pods on one node share its channel, so spreading them is the pods'
/// part, as a multi-node job's pods are spread by anti-affinity).
fn pod(ns: &str, name: &str, clique: Option<&str>) -> anyhow::Result<Pod> {
    let mut p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "domain-workload"}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "domain-workload"}},
                 "topologyKey": "kubernetes.io/hostname"}]}},
            "resourceClaims": [{"name": "imex", "resourceClaimTemplateName": TEMPLATE}],
            "containers": [{"name": "app", "image": "registry.invalid/sim:1",
                "resources": {"claims": [{"name": "imex"}]}}],
        },
    }))?;
    if let (Some(c), Some(spec)) = (clique, p.spec.as_mut()) {
        spec.node_selector = Some([(CLIQUE_LABEL.to_string(), c.to_string())].into());
    }
    Ok(p)
}

async fn bound(pods: &Api<Pod>) -> anyhow::Result<usize> {
    Ok(pods
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .count())
}

/// The nodes `pods` are bound to.
pub async fn nodes_of(pods: &Api<Pod>) -> anyhow::Result<std::collections::BTreeSet<String>> {
    Ok(pods
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.spec?.node_name)
        .collect())
}

/// Makes namespace `ns`, a domain of `n` nodes there and, once it is placed, its `n` pods;
/// waits up to `limit` for the domain to be Ready and every pod bound. With `pin`, the pods
/// also select the nodes of the domain's clique (`status.clique`) by graft-driver's clique
/// label, so that kube-scheduler rules other nodes out by label before it evaluates their
/// devices.
pub async fn ready(
    client: &kube::Client,
    ns: &str,
    n: usize,
    pin: bool,
    limit: Duration,
) -> anyhow::Result<DomainRun> {
    workload::namespace(client, ns).await?;
    let domains: Api<ComputeDomain> = Api::namespaced(client.clone(), ns);
    let cd: ComputeDomain = serde_json::from_value(json!({
        "apiVersion": "resource.graft.dev/v1alpha1", "kind": "ComputeDomain",
        "metadata": {"name": "wide", "namespace": ns},
        "spec": {"numNodes": n, "channel": {"resourceClaimTemplate": {"name": TEMPLATE}}},
    }))?;
    let start = Instant::now();
    domains
        .create(&PostParams::default(), &cd)
        .await
        .with_context(|| format!("creating the domain of {ns}"))?;
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), ns);
    while templates.get_opt(TEMPLATE).await?.is_none() {
        if start.elapsed() > limit {
            let status = domains.get("wide").await?.status;
            anyhow::bail!("{ns}: the domain was not placed in {limit:?}: {status:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let placed_in = start.elapsed();
    let clique = match pin {
        true => domains.get("wide").await?.status.and_then(|s| s.clique),
        false => None,
    };
    anyhow::ensure!(
        pin == clique.is_some(),
        "{ns}: placed, but no clique in its status"
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let t0 = Instant::now();
    let made = (0..n).map(|i| pod(ns, &format!("w{i:04}"), clique.as_deref()));
    workload::create_all(&pods, made).await?;
    let created_in = t0.elapsed();
    let ready_in = loop {
        let status = domains.get("wide").await?.status.unwrap_or_default();
        if status.status == Readiness::Ready {
            break t0.elapsed();
        }
        if t0.elapsed() > limit {
            let ready = status
                .nodes
                .iter()
                .filter(|s| s.status == Readiness::Ready)
                .count();
            let daemons: Api<Pod> = Api::namespaced(client.clone(), super::graft::NAMESPACE);
            anyhow::bail!(
                "{ns}: not Ready {limit:?} after its pods: {ready} of {n} nodes Ready, {} pods \
                 bound on {} nodes, {} daemon pods bound, {:?}",
                bound(&pods).await?,
                nodes_of(&pods).await?.len(),
                bound(&daemons).await?,
                status.message
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let bound_in = loop {
        let b = bound(&pods).await?;
        if b == n {
            break t0.elapsed();
        }
        anyhow::ensure!(
            t0.elapsed() < limit,
            "{ns}: {b} of {n} pods bound {limit:?} after they were made: {:?}",
            workload::unbound(client, ns, 3).await?
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    Ok(DomainRun {
        nodes: n,
        pinned: pin,
        placed_in,
        created_in,
        ready_in,
        bound_in,
    })
}

/// Deletes the pods and claims of `ns` ([`workload::clear`]) and its domain, and waits
/// until the controller has let the domain go (its finalizer: the DaemonSet and slot freed).
pub async fn clear(client: &kube::Client, ns: &str, limit: Duration) -> anyhow::Result<()> {
    let start = Instant::now();
    let domains: Api<ComputeDomain> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let _ = pods
        .delete_collection(
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
            &ListParams::default(),
        )
        .await?;
    let _ = domains.delete("wide", &DeleteParams::default()).await;
    while domains.get_opt("wide").await?.is_some() {
        anyhow::ensure!(
            start.elapsed() < limit,
            "{ns}: the domain still there after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    workload::clear(client, ns, limit.saturating_sub(start.elapsed())).await
}
