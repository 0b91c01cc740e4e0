//! graft-driver's pod cache (`--pod-cache`) against a real kube-apiserver: the pods bound to
//! its node come from one watch, and a prepare reads only its claims (the call's log line
//! counts the pods the cache gave). A pod not bound to the node is read with a GET, and a
//! pod deleted and made again under its name (a new UID) gets the claim, its predecessor
//! nothing.
//!
//! Needs the testbed and the workspace binaries, as `driver_apiserver`.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_integration::apiserver;
use graft_integration::claims::{allocated_claim, namespace, pod_on, uid};
use graft_integration::dra_node::{prepare, DraNode};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};

const DEVICES: &str = "[[devices]]\npath = \"/dev/null\"\n[[devices]]\npath = \"/dev/zero\"\n";

/// The containers the record of `claim` gives pod `pod_uid`.
fn containers(node: &DraNode, claim: &str, pod_uid: &str) -> anyhow::Result<Vec<String>> {
    let rec = node.record(claim)?.context("no record")?;
    Ok(rec
        .pods
        .iter()
        .filter(|p| p.uid == pod_uid)
        .flat_map(|p| p.containers.iter().map(|c| c.name.clone()))
        .collect())
}

/// Deletes pod `name` at once (no kubelet here to finish a graceful deletion).
async fn delete_now(api: &Api<Pod>, name: &str) -> anyhow::Result<()> {
    api.delete(name, &DeleteParams::default().grace_period(0))
        .await?;
    let start = Instant::now();
    while api.get_opt(name).await?.is_some() {
        ensure!(start.elapsed() < Duration::from_secs(30), "{name} stays");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// `pods_cached` of the driver's last NodePrepareResources log line.
fn pods_cached(node: &DraNode) -> anyhow::Result<u64> {
    let log = node
        .driver
        .wait_log("NodePrepareResources", Duration::from_secs(10))?;
    let line = log
        .lines()
        .rfind(|l| l.contains("NodePrepareResources"))
        .context("no prepare logged")?;
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("pods_cached="))
        .context("no pods_cached")?
        .parse()
        .context("pods_cached")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_cache_answers_for_bound_pods_and_reads_the_rest() -> anyhow::Result<()> {
    let cp = apiserver::shared()?;
    let node = DraNode::start_with(cp, "node-podcache", DEVICES, &["--pod-cache"]).await?;
    let c = &node.client;
    namespace(c, "podcache").await?;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "podcache");
    let ctrs: &[(&str, &[(&str, &str)])] = &[("uses", &[("d", "")]), ("plain", &[])];
    let pod_uid = |p: &Pod| p.metadata.uid.clone().unwrap_or_default();
    let here = Some("node-podcache");

    // Bound here: the watch has it.
    let bound = pod_on(c, "podcache", "bound", here, &[("d", "c1")], ctrs).await?;
    // Not bound (as before the scheduler's binding): the watch does not show it.
    let unbound = pod_on(c, "podcache", "unbound", None, &[("d", "c1")], ctrs).await?;
    // Bound here, then deleted and made again under its name (a new UID).
    let old = pod_on(c, "podcache", "again", here, &[("d", "c2")], ctrs).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    delete_now(&pods, "again").await?;
    let again = pod_on(c, "podcache", "again", here, &[("d", "c2")], ctrs).await?;
    ensure!(pod_uid(&again) != pod_uid(&old));
    tokio::time::sleep(Duration::from_secs(2)).await;

    let none = serde_json::json!([]);
    let c1 = allocated_claim(
        c,
        "podcache",
        "c1",
        "node-podcache",
        &[("r", "null")],
        none.clone(),
        &[&bound, &unbound],
    )
    .await?;
    let c2 = allocated_claim(
        c,
        "podcache",
        "c2",
        "node-podcache",
        &[("r", "zero")],
        none,
        &[&again],
    )
    .await?;
    let r = prepare(&node, &[&c1, &c2]).await?;
    for claim in [&c1, &c2] {
        let got = &r[&uid(claim)];
        ensure!(got.error.is_empty(), "{}", got.error);
    }
    ensure!(containers(&node, &uid(&c1), &pod_uid(&bound))? == ["uses"]);
    ensure!(containers(&node, &uid(&c1), &pod_uid(&unbound))? == ["uses"]);
    ensure!(containers(&node, &uid(&c2), &pod_uid(&again))? == ["uses"]);
    ensure!(containers(&node, &uid(&c2), &pod_uid(&old))?.is_empty());
    // The two bound pods from the cache, the unbound one read.
    let n = pods_cached(&node)?;
    ensure!(
        n == 2,
        "{n} pods from the cache, not 2:\n{}",
        node.driver.log_text()
    );
    Ok(())
}
