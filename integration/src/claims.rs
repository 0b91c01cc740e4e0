//! API objects for driver tests and benchmarks, written the way the control plane would
//! write them: namespaces, pods that reference claims, and claims whose allocation and
//! reservation are set in their status as the scheduler sets them.

use graft_proto::dra::v1;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

/// The DRA driver name the tests register.
pub const DRIVER_NAME: &str = "graft.dev";

fn reserved(pods: &[&Pod]) -> Vec<Value> {
    pods.iter()
        .map(|p| json!({"resource": "pods", "name": p.metadata.name, "uid": p.metadata.uid}))
        .collect()
}

/// Creates namespace `name` with its default service account.
pub async fn namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let ns: Api<Namespace> = Api::all(client.clone());
    let mut n = Namespace::default();
    n.metadata.name = Some(name.into());
    ns.create(&PostParams::default(), &n).await?;
    // No controller-manager here: the default service account pods need is made by hand.
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    let mut a = ServiceAccount::default();
    a.metadata.name = Some("default".into());
    sa.create(&PostParams::default(), &a).await?;
    Ok(())
}

/// Creates a pod (containers described as `(name, [(claim, request)])`, init containers
/// marked with a leading `init:`) that references claims directly by name.
pub async fn pod(
    client: &kube::Client,
    ns: &str,
    name: &str,
    claims: &[(&str, &str)],
    containers: &[(&str, &[(&str, &str)])],
) -> anyhow::Result<Pod> {
    pod_on(client, ns, name, None, claims, containers).await
}

/// [`pod`], bound to `node` when given (`spec.nodeName`, as the scheduler's binding sets
/// it): what a claim on that node is reserved for.
pub async fn pod_on(
    client: &kube::Client,
    ns: &str,
    name: &str,
    node: Option<&str>,
    claims: &[(&str, &str)],
    containers: &[(&str, &[(&str, &str)])],
) -> anyhow::Result<Pod> {
    let ctr = |n: &str, refs: &[(&str, &str)]| {
        let refs: Vec<Value> = refs
            .iter()
            .map(|(c, r)| {
                if r.is_empty() {
                    json!({"name": c})
                } else {
                    json!({"name": c, "request": r})
                }
            })
            .collect();
        json!({"name": n, "image": "docker.io/library/busybox:test",
               "resources": {"claims": refs}})
    };
    let init: Vec<Value> = containers
        .iter()
        .filter_map(|(n, r)| n.strip_prefix("init:").map(|n| ctr(n, r)))
        .collect();
    let main: Vec<Value> = containers
        .iter()
        .filter(|(n, _)| !n.starts_with("init:"))
        .map(|(n, r)| ctr(n, r))
        .collect();
    let rc: Vec<Value> = claims
        .iter()
        .map(|(pod_name, claim)| json!({"name": pod_name, "resourceClaimName": claim}))
        .collect();
    let mut p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"resourceClaims": rc, "initContainers": init, "containers": main,
                 "automountServiceAccountToken": false}
    }))?;
    if let Some(spec) = p.spec.as_mut() {
        spec.node_name = node.map(str::to_string);
    }
    Ok(Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &p)
        .await?)
}

/// A claim allocated as the scheduler would: `results` are `(request, device)` on `node`'s
/// pool (the claim has one request per distinct name), reserved for `pods`.
pub async fn allocated_claim(
    client: &kube::Client,
    ns: &str,
    name: &str,
    node: &str,
    results: &[(&str, &str)],
    config: Value,
    pods: &[&Pod],
) -> anyhow::Result<ResourceClaim> {
    allocated_claim_of(client, DRIVER_NAME, ns, name, node, results, config, pods).await
}

/// [`allocated_claim`] with `driver`'s devices (another DRA driver's, for a bench).
#[allow(clippy::too_many_arguments)]
pub async fn allocated_claim_of(
    client: &kube::Client,
    driver: &str,
    ns: &str,
    name: &str,
    node: &str,
    results: &[(&str, &str)],
    config: Value,
    pods: &[&Pod],
) -> anyhow::Result<ResourceClaim> {
    let api: Api<ResourceClaim> = Api::namespaced(client.clone(), ns);
    let mut requests: Vec<&str> = results.iter().map(|(r, _)| *r).collect();
    requests.dedup();
    let reqs: Vec<Value> = requests
        .iter()
        .map(|r| json!({"name": r, "exactly": {"deviceClassName": "graft.dev"}}))
        .collect();
    let c: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": reqs}}
    }))?;
    api.create(&PostParams::default(), &c).await?;
    let results: Vec<Value> = results
        .iter()
        .map(|(r, d)| json!({"request": r, "driver": driver, "pool": node, "device": d}))
        .collect();
    let status = json!({"status": {
        "allocation": {"devices": {"results": results, "config": config}},
        "reservedFor": reserved(pods)
    }});
    Ok(api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await?)
}

/// Reserves `claim` for `pods`, as the scheduler does.
pub async fn reserve_for(
    client: &kube::Client,
    claim: &ResourceClaim,
    pods: &[&Pod],
) -> anyhow::Result<()> {
    let ns = claim.metadata.namespace.as_deref().unwrap_or_default();
    Api::<ResourceClaim>::namespaced(client.clone(), ns)
        .patch_status(
            claim.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"reservedFor": reserved(pods)}})),
        )
        .await?;
    Ok(())
}

/// The claim as the kubelet names it in a DRA call.
pub fn claim_msg(c: &ResourceClaim) -> v1::Claim {
    v1::Claim {
        namespace: c.metadata.namespace.clone().unwrap_or_default(),
        uid: c.metadata.uid.clone().unwrap_or_default(),
        name: c.metadata.name.clone().unwrap_or_default(),
    }
}

/// The claim's UID.
pub fn uid(c: &ResourceClaim) -> String {
    c.metadata.uid.clone().unwrap_or_default()
}

/// The common case: a pod with one container that uses all of claim `name`, and the claim,
/// allocated `device` on `node` for request `r` and reserved for the pod.
pub async fn claim_with_pod(
    client: &kube::Client,
    ns: &str,
    name: &str,
    node: &str,
    device: &str,
) -> anyhow::Result<(Pod, ResourceClaim)> {
    let p = pod(
        client,
        ns,
        &format!("{name}-pod"),
        &[("d", name)],
        &[("c", &[("d", "")])],
    )
    .await?;
    let c = allocated_claim(client, ns, name, node, &[("r", device)], json!([]), &[&p]).await?;
    Ok((p, c))
}
