//! A domain's pods are bound once its IMEX daemon is Ready where they run: the controller
//! writes the binding conditions of each allocated channel that carries them (as the
//! scheduler copies them from graft's slices), through the API server's own validation and
//! per-driver authorization of device status.

use std::time::Duration;

use anyhow::Context as _;
use graft_compute_domain::binding::{FAILED_CONDITION, READY_CONDITION};
use graft_compute_domain::crd::ComputeDomain;
use graft_compute_domain::objects::{DOMAIN_LABEL, NAMESPACE_ANNOTATION, NAME_ANNOTATION};
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

use super::harness::{client, controller_with, domain, namespaces, wait};
use super::{daemon_pod, event_says, status_of};

/// A workload claim of `cd` allocated `imex-channel-1` on `node` now, with the binding
/// conditions graft's slices give it, as the scheduler writes it while the pod waits.
async fn waiting_claim(
    c: &kube::Client,
    cd: &ComputeDomain,
    name: &str,
    node: &str,
) -> anyhow::Result<()> {
    let ns = cd.namespace().unwrap_or_default();
    let api: Api<ResourceClaim> = Api::namespaced(c.clone(), &ns);
    let rc: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {DOMAIN_LABEL: cd.uid()},
                     "annotations": {NAME_ANNOTATION: cd.name_any(), NAMESPACE_ANNOTATION: ns}},
        "spec": {"devices": {"requests": [{"name": "channel",
                                           "exactly": {"deviceClassName": "imex-channel.graft.dev"}}]}},
    }))?;
    api.create(&PostParams::default(), &rc).await?;
    let status = json!({"status": {"allocation": {
        "devices": {"results": [{"request": "channel", "driver": "graft.dev",
                                 "pool": node, "device": "imex-channel-1",
                                 "bindingConditions": [READY_CONDITION],
                                 "bindingFailureConditions": [FAILED_CONDITION]}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
        "allocationTimestamp": Timestamp::now().to_string(),
    }}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// `type=status/reason` of each condition on the claim's channel.
async fn conditions(c: &kube::Client, ns: &str, name: &str) -> anyhow::Result<Vec<String>> {
    let api: Api<ResourceClaim> = Api::namespaced(c.clone(), ns);
    let rc = api.get(name).await?;
    let mut out: Vec<String> = rc
        .status
        .and_then(|s| s.devices)
        .into_iter()
        .flatten()
        .flat_map(|d| d.conditions.unwrap_or_default())
        .map(|c| format!("{}={}/{}", c.type_, c.status, c.reason))
        .collect();
    out.sort();
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domains_pod_is_bound_once_its_daemon_is_ready_or_placed_again() -> anyhow::Result<()> {
    let c = client().await?;
    let ns = "cd-bind";
    let daemons = namespaces(&c, ns).await?;
    let _ctl = controller_with(&c, ns, "lease", "one", |ctx| {
        ctx.only_namespace(ns)
            .with_binding_timeout(Duration::from_secs(6))
    });
    let cd = domain(&c, ns, "d", 2, "work").await?;
    wait(|| async { Ok(status_of(&c, ns, "d").await?.and_then(|s| s.slot).is_some()) }).await?;

    // Allocated on cd-a: waits (said once), then Ready once the daemon there is.
    waiting_claim(&c, &cd, "work-a", "cd-a").await?;
    let waiting = format!("{READY_CONDITION}=False/WaitingForDaemon");
    wait(|| async { Ok(conditions(&c, ns, "work-a").await? == [waiting.clone()]) }).await?;
    daemon_pod(&c, &daemons, &cd, "cd-a", true).await?;
    let ready = format!("{READY_CONDITION}=True/DaemonReady");
    wait(|| async { Ok(conditions(&c, ns, "work-a").await? == [ready.clone()]) }).await?;

    // Allocated on cd-b, whose daemon never turns Ready: past the timeout the binding fails,
    // so that the scheduler places the pod again, and the domain's Events say so.
    waiting_claim(&c, &cd, "work-b", "cd-b").await?;
    daemon_pod(&c, &daemons, &cd, "cd-b", false).await?;
    let failed = vec![
        format!("{FAILED_CONDITION}=True/NotReadyInTime"),
        format!("{READY_CONDITION}=False/NotReadyInTime"),
    ];
    wait(|| async { Ok(conditions(&c, ns, "work-b").await? == failed) }).await?;
    wait(|| async { event_says(&c, ns, "d", "BindingFailed", "work-b").await }).await?;
    // The settled one is left as it was.
    let a = conditions(&c, ns, "work-a").await?;
    anyhow::ensure!(a == [ready.clone()], "{a:?}");
    status_of(&c, ns, "d").await?.context("status")?;
    Ok(())
}
