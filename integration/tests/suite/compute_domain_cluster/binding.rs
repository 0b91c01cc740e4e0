//! ComputeDomain readiness decided before binding: with ComputeDomains on, graft's IMEX
//! channels carry DRA binding conditions, so the scheduler holds each pod in its binding
//! cycle until graft's controller reports the domain's IMEX daemon Ready on the pod's node;
//! the kubelet then prepares a channel whose domain is ready, and prepare never waits.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::ensure;
use graft_integration::cluster::multi::domains::{plain_pod, template_pod};
use graft_integration::cluster::multi::MultiCluster;
use graft_integration::cluster::workloads::{pod_events, wait_running};

use super::setup::*;

const READY: &str = "resource.graft.dev/ComputeDomainReady";

/// Creates `pods` (YAML) and waits until every one of `names` runs; how long that took.
fn time_to_running(mc: &MultiCluster, pods: &str, names: &[&str]) -> anyhow::Result<Duration> {
    let start = Instant::now();
    mc.cluster.apply(pods)?;
    for n in names {
        wait_running(&mc.cluster, NS, n)?;
    }
    Ok(start.elapsed())
}

pub(super) fn binds_when_ready(mc: &MultiCluster) -> anyhow::Result<()> {
    let c = &mc.cluster;
    let a: Vec<&str> = mc.nodes[1..].iter().map(String::as_str).collect();
    // The floor: two pods without claims on the same two nodes.
    let plain = time_to_running(
        mc,
        &(plain_pod(NS, "p1", a[0]) + &plain_pod(NS, "p2", a[1])),
        &["p1", "p2"],
    )?;
    c.kubectl(&["-n", NS, "delete", "pod", "p1", "p2", "--wait=true"])?;

    let uid = create_domain(mc, "d1", 2)?;
    let domain = time_to_running(
        mc,
        &(template_pod(NS, "w1", "d1-channel", None) + &template_pod(NS, "w2", "d1-channel", None)),
        &["w1", "w2"],
    )?;
    let on: BTreeSet<String> = ["w1", "w2"].iter().map(|w| node_of(mc, w)).collect();
    ensure!(
        on == a.iter().map(|s| s.to_string()).collect(),
        "the domain's pods run on {on:?}"
    );
    for w in ["w1", "w2"] {
        let events = pod_events(c, NS, w)?;
        // The scheduler waited for the binding conditions; the kubelet's prepare never
        // refused or timed out.
        ensure!(
            events.contains("BindingConditionsPending"),
            "{w} was bound without waiting for its domain:\n{events}"
        );
        ensure!(
            !events.contains("FailedPrepareDynamicResources"),
            "{w}'s prepare failed:\n{events}"
        );
    }
    let conditions = c.kubectl(&[
        "-n",
        NS,
        "get",
        "resourceclaims",
        "-o",
        "jsonpath={range .items[*]}{.status.devices[0].conditions[0].type}={.status.devices[0].conditions[0].status}{\"\\n\"}{end}",
    ])?;
    ensure!(
        conditions
            .lines()
            .filter(|l| *l == format!("{READY}=True"))
            .count()
            == 2,
        "the claims' device conditions: {conditions}"
    );
    let ratio = domain.as_secs_f64() / plain.as_secs_f64();
    eprintln!(
        "creation to Running, two pods: without claims {plain:?}, a two-node domain's \
         {domain:?} (its IMEX daemons formed meanwhile): {ratio:.2}x"
    );
    eprintln!(
        "where the time went (API timestamps, whole seconds):\n{}",
        timeline(mc, &uid)?
    );
    delete_all(mc, &[("d1", &uid)])
}

/// The domain's pods and IMEX daemons as the API server dates them: each step's second
/// after the first workload pod was created.
fn timeline(mc: &MultiCluster, uid: &str) -> anyhow::Result<String> {
    use serde_json::Value;
    let pods: Value =
        serde_json::from_str(&mc.cluster.kubectl(&["get", "pods", "-A", "-o", "json"])?)?;
    let at = |v: &Value| {
        v.as_str()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .map(|t| t.as_second())
    };
    let condition = |p: &Value, kind: &str| {
        p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == kind && c["status"] == "True")
            .and_then(|c| at(&c["lastTransitionTime"]))
    };
    let mut steps: Vec<(i64, String)> = Vec::new();
    for p in pods["items"].as_array().into_iter().flatten() {
        let name = p["metadata"]["name"].as_str().unwrap_or_default();
        let what = if name == "w1" || name == "w2" {
            name.to_string()
        } else if name.starts_with(&format!("imex-{uid}")) {
            format!(
                "daemon on {}",
                p["spec"]["nodeName"].as_str().unwrap_or("?")
            )
        } else {
            continue;
        };
        let started = p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"].clone();
        for (step, t) in [
            ("created", at(&p["metadata"]["creationTimestamp"])),
            ("bound", condition(p, "PodScheduled")),
            ("container started", at(&started)),
            ("Ready", condition(p, "Ready")),
        ] {
            if let Some(t) = t {
                steps.push((t, format!("{what} {step}")));
            }
        }
    }
    let first = steps
        .iter()
        .filter(|(_, s)| s.starts_with('w') && s.ends_with("created"))
        .map(|(t, _)| *t)
        .min()
        .unwrap_or_default();
    steps.sort();
    Ok(steps
        .iter()
        .map(|(t, s)| format!("  +{} s {s}", t - first))
        .collect::<Vec<_>>()
        .join("\n"))
}

pub(super) fn two_pods_per_node(mc: &MultiCluster) -> anyhow::Result<()> {
    let c = &mc.cluster;
    let (n2, n3) = (mc.nodes[1].as_str(), mc.nodes[2].as_str());
    let uid = create_domain(mc, "d1", 2)?;
    let pods = [("w1", n2), ("w2", n2), ("w3", n3), ("w4", n3)];
    let yaml: String = pods
        .iter()
        .map(|(w, n)| template_pod(NS, w, "d1-channel", Some(n)))
        .collect();
    c.apply(&yaml)?;
    for (w, _) in pods {
        wait_running(c, NS, w)?;
    }
    let first = mc.channels_in(NS, "w1")?;
    ensure!(first.len() == 1, "w1's channels: {first:?}");
    for (w, n) in pods {
        ensure!(
            node_of(mc, w) == n,
            "{w} runs on {}, not {n}",
            node_of(mc, w)
        );
        let ch = mc.channels_in(NS, w)?;
        ensure!(ch == first, "{w} has {ch:?}, w1 {first:?}");
    }
    let a: BTreeSet<String> = [n2.to_string(), n3.to_string()].into();
    wait_ready_on(mc, "d1", &a)?;
    eprintln!("four pods of one domain on two nodes, each with {first:?}");
    delete_all(mc, &[("d1", &uid)])
}
