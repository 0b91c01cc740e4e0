//! A domain's pods are bound once its IMEX daemon is Ready where they run: the controller
//! writes the binding conditions of each allocated channel that carries them (as the
//! scheduler copies them from graft's slices), through the API server's own validation and
//! per-driver authorization of device status.

use std::time::Duration;

use anyhow::Context as _;
use graft_compute_domain::binding::{FAILED_CONDITION, READY_CONDITION};
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::Api;

/// The controller's binding timeout here: long enough that a loaded machine sees the wait
/// before it ends; the failure is tested with a claim allocated longer ago.
const TIMEOUT: Duration = Duration::from_secs(120);

use super::harness::{client, controller_with, domain, namespaces, wait};
use super::slots::allocated_claim;
use super::{daemon_pod, event_says, status_of};

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
        ctx.only_namespace(ns).with_binding_timeout(TIMEOUT)
    });
    let cd = domain(&c, ns, "d", 2, "work").await?;
    wait(|| async { Ok(status_of(&c, ns, "d").await?.and_then(|s| s.slot).is_some()) }).await?;

    // Allocated on cd-a: waits (said once), then Ready once the daemon there is.
    allocated_claim(&c, &cd, "work-a", "cd-a", Some(Timestamp::now())).await?;
    let waiting = format!("{READY_CONDITION}=False/WaitingForDaemon");
    wait(|| async { Ok(conditions(&c, ns, "work-a").await? == [waiting.clone()]) }).await?;
    daemon_pod(&c, &daemons, &cd, "cd-a", true).await?;
    let ready = format!("{READY_CONDITION}=True/DaemonReady");
    wait(|| async { Ok(conditions(&c, ns, "work-a").await? == [ready.clone()]) }).await?;

    // Allocated on cd-b longer ago than the timeout, whose daemon is not Ready: the binding
    // fails at the controller's first look, so that the scheduler places the pod again, and
    // the domain's Events say so.
    let long_ago = Timestamp::now() - SignedDuration::from_secs(2 * TIMEOUT.as_secs() as i64);
    allocated_claim(&c, &cd, "work-b", "cd-b", Some(long_ago)).await?;
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
