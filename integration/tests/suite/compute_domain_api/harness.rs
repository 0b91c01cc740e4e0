//! What the ComputeDomain tests share: an API server of their own (their fake
//! ResourceSlices are cluster-wide and must not meet other suites' IMEX channels), the CRD,
//! three nodes in two cliques, and a controller per test, scoped to the test's namespace.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use graft_compute_domain::clique::channel_slice;
use graft_compute_domain::metrics::Metrics;
use graft_compute_domain::{ComputeDomain, Context, DaemonConfig, Election};
use graft_integration::apiserver::{self, ControlPlane};
use graft_integration::claims::namespace;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube::runtime::events::Reporter;
use kube::CustomResourceExt;
use serde_json::json;

/// How long anything the controller does may take here (generous: CI runs every suite at
/// once on two cores).
pub const WAIT: Duration = Duration::from_secs(60);

/// The nodes and their cliques: two in u.1, one in u.2, two channels each.
pub const NODES: [(&str, &str); 3] = [("cd-a", "u.1"), ("cd-b", "u.1"), ("cd-c", "u.2")];

/// The suite's API server.
pub fn cp() -> anyhow::Result<&'static ControlPlane> {
    apiserver::named("compute_domain")
}

fn exists<T>(r: Result<T, kube::Error>) -> anyhow::Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A client of the suite's API server, with the CRD, the nodes and their slices in place.
pub async fn client() -> anyhow::Result<kube::Client> {
    let c = cp()?.client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    exists(
        crds.create(&PostParams::default(), &ComputeDomain::crd())
            .await,
    )?;
    let nodes: Api<Node> = Api::all(c.clone());
    let slices: Api<ResourceSlice> = Api::all(c.clone());
    for (n, clique) in NODES {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": n}}))?;
        exists(nodes.create(&PostParams::default(), &node).await)?;
        exists(
            slices
                .create(&PostParams::default(), &channel_slice(n, clique, 2))
                .await,
        )?;
    }
    // The CRD serves once established.
    let domains: Api<ComputeDomain> = Api::all(c.clone());
    wait(|| async { Ok(domains.list(&Default::default()).await.is_ok()) }).await?;
    Ok(c)
}

/// Polls `f` until it is true, for at most [`WAIT`].
pub async fn wait<F, Fut>(f: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    wait_within(WAIT, f).await
}

/// Polls `f` until it is true, for at most `limit`.
pub async fn wait_within<F, Fut>(limit: Duration, mut f: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let start = Instant::now();
    loop {
        if f().await? {
            return Ok(());
        }
        if start.elapsed() > limit {
            bail!("not within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A test's namespaces: `ns` for its domains, `ns-graft` for their daemons.
pub async fn namespaces(c: &kube::Client, ns: &str) -> anyhow::Result<String> {
    namespace(c, ns).await?;
    let daemons = format!("{ns}-graft");
    namespace(c, &daemons).await?;
    Ok(daemons)
}

/// A controller for the domains of `ns` (daemons in `ns-graft`), electing through the
/// Lease `lease` there; stops when the task is aborted or the test's runtime ends.
pub fn controller(
    c: &kube::Client,
    ns: &str,
    lease: &str,
    identity: &str,
) -> tokio::task::JoinHandle<()> {
    let scope = ns.to_string();
    controller_with(c, ns, lease, identity, move |ctx| {
        ctx.only_namespace(&scope)
    })
}

/// A controller with its daemons in `ns-graft`, electing through the Lease `lease` there,
/// for the domains `scope` makes its context serve (a namespace, a label selector).
pub fn controller_with(
    c: &kube::Client,
    ns: &str,
    lease: &str,
    identity: &str,
    scope: impl FnOnce(Context) -> Context,
) -> tokio::task::JoinHandle<()> {
    let daemons = format!("{ns}-graft");
    let cfg = DaemonConfig {
        namespace: daemons.clone(),
        image: "localhost/graft:dev".into(),
        ..Default::default()
    };
    let reporter = Reporter {
        controller: "graft-compute-domain-controller".into(),
        instance: Some(identity.into()),
    };
    let ctx = scope(Context::new(c.clone(), cfg, Metrics::default(), reporter));
    let election = Election {
        namespace: daemons,
        name: lease.into(),
        identity: identity.into(),
        duration: Duration::from_secs(4),
        retry: Duration::from_secs(1),
    };
    tokio::spawn(graft_compute_domain::run_elected(
        Arc::new(ctx),
        election,
        std::future::pending(),
    ))
}

/// Creates a domain.
pub async fn domain(
    c: &kube::Client,
    ns: &str,
    name: &str,
    num_nodes: u32,
    template: &str,
) -> anyhow::Result<ComputeDomain> {
    let cd: ComputeDomain = serde_json::from_value(json!({
        "apiVersion": "resource.graft.dev/v1alpha1", "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"numNodes": num_nodes, "channel": {"resourceClaimTemplate": {"name": template}}},
    }))?;
    let api: Api<ComputeDomain> = Api::namespaced(c.clone(), ns);
    Ok(api.create(&PostParams::default(), &cd).await?)
}
