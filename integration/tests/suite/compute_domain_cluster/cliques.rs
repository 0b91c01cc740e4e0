//! compute_domain_clique_follows_free_gpus: a domain's clique is chosen from nodes with a
//! free GPU as well as a free channel, and chosen again while none of its claims is
//! allocated (compute-domain/src/revisit.rs).

use std::collections::BTreeSet;

use anyhow::ensure;
use graft_integration::cluster::multi::domains::compute_domain;
use graft_integration::cluster::multi::MultiCluster;
use graft_integration::cluster::workloads::{gpus_template, wait_running, BUSYBOX};

use super::setup::*;

/// A claim template for every whole GPU of the node its pod lands on.
const ALL_GPUS: &str = r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: gpu-all, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly: {deviceClassName: gpu.graft.dev, allocationMode: All}
"#;

/// A pod `name` using the claim templates `claims` (named as their templates), on `node`
/// when given.
fn pod(name: &str, claims: &[&str], node: Option<&str>) -> String {
    let select = node
        .map(|n| format!("\n  nodeSelector: {{kubernetes.io/hostname: {n}}}"))
        .unwrap_or_default();
    let pod_claims: Vec<String> = claims
        .iter()
        .map(|t| format!("{{name: {t}, resourceClaimTemplateName: {t}}}"))
        .collect();
    let uses: Vec<String> = claims.iter().map(|t| format!("{{name: {t}}}")).collect();
    format!(
        r#"---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {NS}, labels: {{graft-test: domains}}}}
spec:
  terminationGracePeriodSeconds: 1{select}
  resourceClaims: [{}]
  containers:
  - name: app
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: ["sleep", "3600"]
    resources: {{claims: [{}]}}
"#,
        pod_claims.join(", "),
        uses.join(", ")
    )
}

/// Creates a one-node domain `name` and returns its uid and the clique it went to.
fn one_node_domain(mc: &MultiCluster, name: &str) -> anyhow::Result<(String, String)> {
    let template = format!("{name}-channel");
    mc.cluster
        .apply(&compute_domain(NS, name, 1, &template, "Single"))?;
    let d = mc.wait_domain(NS, name, "no clique chosen", |d| {
        d["status"]["clique"].as_str().is_some()
    })?;
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    Ok((text(&d["metadata"]["uid"]), text(&d["status"]["clique"])))
}

pub(super) fn clique_follows_free_gpus(mc: &MultiCluster) -> anyhow::Result<()> {
    let c = &mc.cluster;
    let (n1, a) = (&mc.nodes[0], &mc.nodes[1..]);
    let (clique_a, clique_b) = (
        graft_integration::cluster::multi::domains::clique_id(FABRIC, CLIQUE_A),
        graft_integration::cluster::multi::domains::clique_id(FABRIC, CLIQUE_B),
    );
    c.apply(&(gpus_template("gpu1", 1, false) + "---\n" + ALL_GPUS))?;
    // Node 1 alone is clique B, the smallest with room for one node.
    let (uid1, at) = one_node_domain(mc, "d1")?;
    ensure!(at == clique_b, "d1 went to {at}, not clique B ({clique_b})");
    // Node 1's whole GPUs taken; then d1's pod asks for a GPU beside the domain's channel.
    c.apply(&pod("filler", &["gpu-all"], Some(n1)))?;
    wait_running(c, NS, "filler")?;
    c.apply(&pod("w1", &["d1-channel", "gpu1"], None))?;
    let took = wait_running(c, NS, "w1")?;
    let on = node_of(mc, "w1");
    ensure!(a.contains(&on), "w1 runs on {on}, not in clique A {a:?}");
    let d = mc.domain(NS, "d1")?;
    ensure!(
        d["status"]["clique"] == clique_a.as_str(),
        "d1 is in {}, not clique A",
        d["status"]["clique"]
    );
    let events = mc.domain_events(NS, "d1")?;
    ensure!(
        events.lines().any(|l| l.starts_with("CliqueChanged:")),
        "no CliqueChanged Event:\n{events}"
    );
    eprintln!("w1 ran on {on} after {took:?}; d1's Events:\n{events}");
    wait_ready_on(mc, "d1", &BTreeSet::from([on]))?;
    // d1 gone frees clique A's one slot; what it left is checked once the filler's claim
    // record is gone too (the check counts every record of a node).
    c.kubectl(&["-n", NS, "delete", "pod", "w1", "--wait=true"])?;
    c.kubectl(&["-n", NS, "delete", "computedomain", "d1", "--wait=true"])?;

    // A new domain, node 1 still full: clique A from the start.
    let (uid2, at) = one_node_domain(mc, "d2")?;
    ensure!(
        at == clique_a,
        "d2 went to {at} while node 1 has no free GPU, not clique A"
    );
    // The filler goes with the domains' pods.
    delete_all(mc, &[("d2", &uid2)])?;
    mc.wait_domain_gone(NS, "d1", &uid1)?;
    c.kubectl(&[
        "-n",
        NS,
        "delete",
        "resourceclaimtemplate",
        "gpu1",
        "gpu-all",
    ])?;
    Ok(())
}
