//! What compute_domain_cluster's tests share: the fabric, the cluster's turn, a domain
//! created and waited for, the checks of its members and daemons, and its removal.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_integration::cluster::gpu;
use graft_integration::cluster::multi::domains::{
    clique_id, compute_domain, is_ready, ready_nodes, STAYS,
};
use graft_integration::cluster::multi::MultiCluster;
use graft_integration::cluster::workloads::phase;
use graft_integration::cluster::{wait_until, Kubernetes};
use serde_json::Value;

pub(super) const NS: &str = "default";
/// One NVLink fabric, two cliques: node 1 in B, nodes 2 and 3 in A.
pub(super) const FABRIC: &str = "6a7b8c9d0e1f4a5b9c8d7e6f5a4b3c2d";
pub(super) const CLIQUE_A: u32 = 7;
pub(super) const CLIQUE_B: u32 = 8;
pub(super) const FABRICS: [Option<(&str, u32)>; 3] = [
    Some((FABRIC, CLIQUE_B)),
    Some((FABRIC, CLIQUE_A)),
    Some((FABRIC, CLIQUE_A)),
];
/// How long a node's loss may take to show: the node controller's grace period (50 s by
/// default) and the domain's reconcile after it.
pub(super) const NODE_LOSS: Duration = Duration::from_secs(240);

/// The three-node cluster the tests share, graft deployed with `channels` IMEX channels per
/// node.
pub(super) struct Bed {
    mc: MultiCluster,
    channels: u32,
    k8s: Kubernetes,
}

/// Runs `test` on the shared three-node cluster with ComputeDomains and exactly `channels`
/// IMEX channels per node (a test may rely on a node's only channel).
/// The cluster the previous test kept is used when it is still clean, else a fresh one
/// comes up. A test that passed keeps it for the next; one that failed takes it down, so
/// that the next starts afresh. The last test of the module takes it down and checks what
/// that left ([`down_leaving_nothing`]).
pub(super) fn on_cluster(
    channels: u32,
    test: impl FnOnce(&MultiCluster) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    on_cluster_of(Kubernetes::Newest, channels, test)
}

/// [`on_cluster`] on a cluster of the Kubernetes `k8s` (a kept one of another is taken
/// down).
pub(super) fn on_cluster_of(
    k8s: Kubernetes,
    channels: u32,
    test: impl FnOnce(&MultiCluster) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let (_turn, kept) = gpu::own_kept_cluster::<Bed>();
    let bed = match kept {
        Some(bed) if bed.k8s == k8s => reuse(bed, channels)?,
        Some(other) => {
            drop(other);
            fresh(channels, k8s)?
        }
        None => fresh(channels, k8s)?,
    };
    test(&bed.mc).map_err(|e| e.context(bed.mc.domain_state(NS)))?;
    gpu::keep(bed);
    Ok(())
}

/// Takes the shared cluster down (one brought up for the purpose when none is kept) and
/// fails with what `down` left behind.
pub(super) fn down_leaving_nothing() -> anyhow::Result<()> {
    let (_turn, kept) = gpu::own_kept_cluster::<Bed>();
    let bed = match kept {
        Some(bed) => bed,
        None => fresh(1, Kubernetes::Newest)?,
    };
    let left = bed.mc.down()?;
    ensure!(left.is_empty(), "down left behind: {left:?}");
    Ok(())
}

fn fresh(channels: u32, k8s: Kubernetes) -> anyhow::Result<Bed> {
    let mc = MultiCluster::up_on(3, k8s)?;
    mc.deploy_domains(&FABRICS, channels)?;
    Ok(Bed { mc, channels, k8s })
}

/// The kept cluster for a test asking `channels`: as it is, with more channels when asked
/// (a rollout of graft), or a fresh one when it is not clean or has too many.
fn reuse(mut bed: Bed, channels: u32) -> anyhow::Result<Bed> {
    if let Err(e) = clean(&bed) {
        eprintln!("compute_domain_cluster: the kept cluster is not clean ({e:#}); a fresh one");
        let k8s = bed.k8s;
        drop(bed);
        return fresh(channels, k8s);
    }
    if bed.channels > channels {
        let k8s = bed.k8s;
        drop(bed);
        return fresh(channels, k8s);
    }
    if bed.channels < channels {
        bed.mc.deploy_domains(&FABRICS, channels)?;
        bed.channels = channels;
    }
    Ok(bed)
}

/// Whether the kept cluster is as a fresh one would be: every node Ready with graft rolled
/// out and its channels published, no domain, no pod or claim left in [`NS`].
fn clean(bed: &Bed) -> anyhow::Result<()> {
    let c = &bed.mc.cluster;
    let ready = c.kubectl(&[
        "get",
        "nodes",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}"#,
    ])?;
    for node in &bed.mc.nodes {
        ensure!(
            ready.lines().any(|l| l == format!("{node}=True")),
            "{node} is not Ready: {ready}"
        );
    }
    wait_until("domains, pods or claims left", || {
        let domains = c.kubectl(&["get", "computedomains", "-A", "-o", "name"])?;
        let left = c.kubectl(&["-n", NS, "get", "pods,resourceclaims", "-o", "name"])?;
        Ok(domains.trim().is_empty() && left.trim().is_empty())
    })?;
    c.kubectl(&[
        "-n",
        "graft-system",
        "rollout",
        "status",
        "daemonset/graft",
        "--timeout=120s",
    ])?;
    for node in &bed.mc.nodes {
        wait_until(&format!("{node} publishes fewer channels"), || {
            let slices = bed.mc.slices(node)?;
            Ok(slices.matches("\"imex-channel-").count() >= bed.channels as usize)
        })?;
    }
    Ok(())
}

/// Creates domain `name` of `nodes` nodes (workload template `<name>-channel`) and waits
/// until the controller chose clique A for it and wrote the template; returns its uid.
pub(super) fn create_domain(mc: &MultiCluster, name: &str, nodes: u32) -> anyhow::Result<String> {
    let template = format!("{name}-channel");
    mc.cluster
        .apply(&compute_domain(NS, name, nodes, &template, "Single"))?;
    let want = clique_id(FABRIC, CLIQUE_A);
    let d = mc.wait_domain(NS, name, "no clique chosen", |d| {
        d["status"]["clique"].as_str().is_some()
    })?;
    ensure!(
        d["status"]["clique"] == want.as_str(),
        "{name} went to clique {}, not {want}",
        d["status"]["clique"]
    );
    wait_until(&format!("no workload template {template}"), || {
        Ok(mc
            .cluster
            .kubectl(&[
                "-n",
                NS,
                "get",
                "resourceclaimtemplate",
                &template,
                "-o",
                "name",
            ])
            .is_ok())
    })?;
    d["metadata"]["uid"]
        .as_str()
        .map(str::to_string)
        .context("the domain has no uid")
}

/// The node pod `name` runs on; empty while it is not scheduled.
pub(super) fn node_of(mc: &MultiCluster, name: &str) -> String {
    mc.cluster
        .kubectl(&[
            "-n",
            NS,
            "get",
            "pod",
            name,
            "-o",
            "jsonpath={.spec.nodeName}",
        ])
        .unwrap_or_default()
}

/// For [`STAYS`], once a second: every one of `pods` is Pending and unbound, and `also`
/// holds. A failure names the pod, followed by `about`.
pub(super) fn stay_pending(
    mc: &MultiCluster,
    pods: &[&str],
    about: &str,
    mut also: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let start = Instant::now();
    while start.elapsed() < STAYS {
        for p in pods {
            let on = node_of(mc, p);
            ensure!(on.is_empty(), "{p} {about} was bound to {on}");
            let now = phase(&mc.cluster, NS, p);
            ensure!(now == "Pending", "{p} {about} is {now}");
        }
        also()?;
        std::thread::sleep(Duration::from_secs(1));
    }
    Ok(())
}

/// Waits until domain `name` is Ready with exactly `nodes` as its Ready members, every one
/// in clique A.
pub(super) fn wait_ready_on(
    mc: &MultiCluster,
    name: &str,
    nodes: &BTreeSet<String>,
) -> anyhow::Result<Value> {
    let d = mc.wait_domain(NS, name, "not Ready", is_ready)?;
    let members: BTreeSet<String> = ready_nodes(&d).into_iter().collect();
    ensure!(
        members == *nodes,
        "{name}'s Ready nodes are {members:?}, not {nodes:?}"
    );
    let a = clique_id(FABRIC, CLIQUE_A);
    for n in d["status"]["nodes"].as_array().into_iter().flatten() {
        ensure!(
            n["cliqueID"] == a.as_str(),
            "{name}: a member outside clique A: {n}"
        );
    }
    Ok(d)
}

/// Checks that each member's IMEX daemon lists every member as READY, under the name of its
/// place (the domain's status gives each member's), and the domain UP.
pub(super) fn daemons_see_each_other(
    mc: &MultiCluster,
    uid: &str,
    nodes: &BTreeSet<String>,
) -> anyhow::Result<()> {
    daemons_see(mc, uid, nodes, true)
}

/// As [`daemons_see_each_other`]; the domain UP only when `whole` (an elastic domain lists
/// places no member holds). Waits for it: a member is Ready as soon as its daemon runs (IMEX
/// needs no quorum), before it has reached the others.
pub(super) fn daemons_see(
    mc: &MultiCluster,
    uid: &str,
    nodes: &BTreeSet<String>,
    whole: bool,
) -> anyhow::Result<()> {
    let start = std::time::Instant::now();
    loop {
        match seen_by_daemons(mc, uid, nodes, whole) {
            Err(_) if start.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_millis(500))
            }
            other => return other,
        }
    }
}

fn seen_by_daemons(
    mc: &MultiCluster,
    uid: &str,
    nodes: &BTreeSet<String>,
    whole: bool,
) -> anyhow::Result<()> {
    let d = mc
        .cluster
        .kubectl(&["-n", NS, "get", "computedomains", "-o", "json"])?;
    let d: Value = serde_json::from_str(&d)?;
    let domain = d["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["metadata"]["uid"] == uid)
        .context("no domain of that uid")?;
    let mut names = Vec::new();
    for n in nodes {
        let place = domain["status"]["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["name"] == n.as_str())
            .and_then(|m| m["index"].as_u64())
            .with_context(|| format!("{n} has no place in the domain's status: {domain:#}"))?;
        names.push(format!("graft-imex-{place}"));
    }
    for node in nodes {
        let table = mc.imex_table(uid, node)?;
        ensure!(
            !whole || table.contains("Domain State: UP"),
            "{node}'s IMEX daemon:\n{table}"
        );
        for name in &names {
            ensure!(
                table
                    .lines()
                    .any(|l| l.contains(&format!(" {name} ")) && l.trim_end().ends_with("READY")),
                "{node}'s IMEX daemon does not see {name} READY:\n{table}"
            );
        }
    }
    Ok(())
}

/// Deletes the test's pods and domain `name` and waits until nothing of it is left.
pub(super) fn delete_all(mc: &MultiCluster, domains: &[(&str, &str)]) -> anyhow::Result<()> {
    let c = &mc.cluster;
    c.kubectl(&[
        "-n",
        NS,
        "delete",
        "pods",
        "-l",
        "graft-test=domains",
        "--wait=true",
    ])?;
    for (name, _) in domains {
        c.kubectl(&["-n", NS, "delete", "computedomain", name, "--wait=true"])?;
    }
    for (name, uid) in domains {
        mc.wait_domain_gone(NS, name, uid)?;
    }
    Ok(())
}

/// Each claim of [`NS`] as `name=<pool of its first device>` (empty: unallocated).
pub(super) fn claim_pools(mc: &MultiCluster) -> anyhow::Result<String> {
    mc.cluster.kubectl(&[
        "-n",
        NS,
        "get",
        "resourceclaims",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.status.allocation.devices.results[0].pool}{\"\\n\"}{end}",
    ])
}
