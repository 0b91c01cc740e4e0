//! Pod startup latency on the single-node cluster with graft deployed: creation (the API
//! create returning) to phase Running (polled every 10 ms), for a pod whose container
//! claims one device through a ResourceClaimTemplate against an identical pod without a
//! claim. 30 of each, interleaved, alternating which goes first. The node has one fuse
//! device, so every pod is deleted (and its claim gone) before the next starts.
//!
//! Run: `cargo build --workspace --bins && cargo bench -p graft-integration --bench cluster_startup`
//! (graft runs from the debug binaries, as in the tests.)

use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_integration::cluster::Cluster;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

const ROUNDS: usize = 30;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[(((v.len() - 1) as f64) * p).round() as usize]
}

fn pod(name: &str, with_claim: bool) -> anyhow::Result<Pod> {
    let mut spec = json!({
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "app", "image": "docker.io/library/busybox:test",
                        "imagePullPolicy": "Never", "command": ["/bin/sleep", "3600"]}]
    });
    if with_claim {
        spec["resourceClaims"] =
            json!([{"name": "dev", "resourceClaimTemplateName": "bench-fuse"}]);
        spec["containers"][0]["resources"] = json!({"claims": [{"name": "dev"}]});
    }
    Ok(serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": "default"}, "spec": spec}),
    )?)
}

async fn start_once(client: &kube::Client, name: &str, with_claim: bool) -> anyhow::Result<f64> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod(name, with_claim)?)
        .await?;
    let t = Instant::now();
    loop {
        let p = pods.get(name).await?;
        if p.status.and_then(|s| s.phase).as_deref() == Some("Running") {
            break;
        }
        ensure!(t.elapsed() < Duration::from_secs(120), "{name} never ran");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ms = t.elapsed().as_secs_f64() * 1e3;
    pods.delete(name, &DeleteParams::default()).await?;
    // Gone from the API and unprepared by the kubelet: until then graft refuses the device
    // to the next claim, and the kubelet's retry backoff would be measured instead.
    let prepared = || {
        std::fs::read_dir("/var/lib/graft/claims")
            .map(|d| d.count())
            .unwrap_or(0)
    };
    while pods.get_opt(name).await?.is_some()
        || !claims.list(&ListParams::default()).await?.items.is_empty()
        || prepared() != 0
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(ms)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let cluster = Cluster::up()?;
    let kc = kube::config::Kubeconfig::read_from(&cluster.kubeconfig)?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    let client = kube::Client::try_from(cfg)?;
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), "default");
    if templates.get_opt("bench-fuse").await?.is_none() {
        let t: ResourceClaimTemplate = serde_json::from_value(json!({
            "metadata": {"name": "bench-fuse", "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "dev", "exactly": {"deviceClassName": "fuse.graft.dev"}}]}}}
        }))?;
        templates.create(&PostParams::default(), &t).await?;
    }
    // Warm-up: one of each.
    start_once(&client, "warm-claim", true).await?;
    start_once(&client, "warm-plain", false).await?;

    let (mut with, mut without) = (Vec::new(), Vec::new());
    for i in 0..ROUNDS {
        let claim_first = i % 2 == 0;
        for with_claim in [claim_first, !claim_first] {
            let name = format!("{}-{i}", if with_claim { "claim" } else { "plain" });
            let ms = start_once(&client, &name, with_claim).await.context(name)?;
            if with_claim {
                with.push(ms)
            } else {
                without.push(ms)
            }
        }
    }
    let (w50, w90, wmax) = (
        pct(&mut with, 0.5),
        pct(&mut with, 0.9),
        pct(&mut with, 1.0),
    );
    let (o50, o90, omax) = (
        pct(&mut without, 0.5),
        pct(&mut without, 0.9),
        pct(&mut without, 1.0),
    );
    println!("pod creation to Running, {ROUNDS} pods each, interleaved");
    println!("| pod | p50 ms | p90 ms | max ms |");
    println!("|---|---|---|---|");
    println!("| one-device claim | {w50:.0} | {w90:.0} | {wmax:.0} |");
    println!("| no claim | {o50:.0} | {o90:.0} | {omax:.0} |");
    println!("median ratio claim/no claim: {:.2}", w50 / o50);
    drop(cluster);
    Ok(())
}
