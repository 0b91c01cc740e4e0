//! ComputeDomains on the multi-node testbed (harness `graft_integration::cluster::multi`,
//! `multi::domains`): graft installed once from the chart with `computeDomains.enabled`,
//! three nodes, the first in clique B and the two others in clique A, so that a two-node
//! domain has one clique to go to and one to stay out of. The tests share one cluster, in
//! name order (setup's `on_cluster`): each leaves it as it found it, a test finds it checked
//! (nodes Ready, graft rolled out, nothing left in the namespace) or brings a fresh one up,
//! and one that failed takes it down. The last test takes it down and checks that nothing
//! is left on the host. Each takes its turn on the host's one testbed cluster through the
//! GPU bed's lock. Needs root, the testbed and the workspace binaries, as cluster_e2e does.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::ensure;
use graft_integration::cluster::multi::domains::{
    is_ready, plain_pod, ready_nodes, template_pod, CHANNEL_DIR, DOMAIN_LABEL, STAYS,
};
use graft_integration::cluster::workloads::{phase, wait_running};
use graft_integration::cluster::{wait_until, Kubernetes};
use graft_integration::fake_gpu::IMEX_MAJOR;
use serde_json::Value;

mod binding;
mod cliques;
mod elastic;
mod gangs;
mod replace;
mod setup;

use setup::*;

/// A two-node domain: its pods land on the two nodes of clique A, both containers get the
/// same channel (the domain's), the IMEX daemons on both nodes report each other READY,
/// the domain turns Ready with both nodes; a pod outside the domain gets no channel.
#[test]
fn compute_domain_across_two_nodes() -> anyhow::Result<()> {
    on_cluster(1, across_two_nodes)
}

fn across_two_nodes(mc: &graft_integration::cluster::multi::MultiCluster) -> anyhow::Result<()> {
    let c = &mc.cluster;
    let uid = create_domain(mc, "d1", 2)?;
    c.apply(
        &(template_pod(NS, "w1", "d1-channel", None) + &template_pod(NS, "w2", "d1-channel", None)),
    )?;
    for w in ["w1", "w2"] {
        wait_running(c, NS, w)?;
    }
    let on: BTreeSet<String> = ["w1", "w2"].iter().map(|w| node_of(mc, w)).collect();
    let a: BTreeSet<String> = mc.nodes[1..].iter().cloned().collect();
    ensure!(
        on == a,
        "the domain's pods run on {on:?}, not on clique A's {a:?}"
    );
    wait_ready_on(mc, "d1", &a)?;
    let (ch1, ch2) = (mc.channels_in(NS, "w1")?, mc.channels_in(NS, "w2")?);
    ensure!(
        ch1.len() == 1 && ch1 == ch2,
        "the pods' channels differ: {ch1:?} / {ch2:?}"
    );
    // The claims are the domain's (labelled with its uid) and hold that channel.
    let label = format!("{DOMAIN_LABEL}={uid}");
    let claims: Value = serde_json::from_str(&c.kubectl(&[
        "-n",
        NS,
        "get",
        "resourceclaims",
        "-l",
        &label,
        "-o",
        "json",
    ])?)?;
    let devices: Vec<&str> = claims["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|cl| cl["status"]["allocation"]["devices"]["results"][0]["device"].as_str())
        .collect();
    let want = ch1[0].replace("channel", "imex-channel-");
    ensure!(
        devices == [want.as_str(), want.as_str()],
        "the domain's claims hold {devices:?}, not {want} twice"
    );
    daemons_see_each_other(mc, &uid, &a)?;

    c.apply(&plain_pod(NS, "outside", &mc.nodes[1]))?;
    wait_running(c, NS, "outside")?;
    let ch = mc.channels_in(NS, "outside")?;
    ensure!(
        ch.is_empty(),
        "a pod outside the domain has {CHANNEL_DIR}: {ch:?}"
    );
    delete_all(mc, &[("d1", &uid)])
}

/// [`compute_domain_across_two_nodes`] on the oldest Kubernetes graft supports, 1.34, with
/// the gates README's support table names (cluster.sh: DRADeviceBindingConditions is alpha
/// there). Named to run after the 1.37 tests, so the cluster changes once.
#[test]
fn on_kubernetes_1_34_a_domain_across_two_nodes() -> anyhow::Result<()> {
    on_cluster_of(Kubernetes::V1_34, 1, |mc| {
        let version = mc.cluster.kubectl(&["version", "-o", "json"])?;
        ensure!(
            version.contains("\"gitVersion\": \"v1.34."),
            "not a 1.34 cluster: {version}"
        );
        across_two_nodes(mc)
    })
}

/// A two-node domain goes to clique A (two nodes), not B (one). With node 3 (clique A)
/// cordoned, its first pod is allocated node 2's channel and waits to be bound (its domain
/// cannot be Ready with one member), and the second stays Pending, unschedulable with the
/// scheduler's reason, while node 1 (clique B) has a free channel it never takes; once node
/// 3 takes pods again, the second lands there, both are bound and the domain turns Ready.
#[test]
fn compute_domain_stays_in_one_clique() -> anyhow::Result<()> {
    on_cluster(1, |mc| {
        let c = &mc.cluster;
        let uid = create_domain(mc, "d1", 2)?;
        let (n1, n2, n3) = (&mc.nodes[0], &mc.nodes[1], &mc.nodes[2]);
        c.kubectl(&["cordon", n3])?;
        let stayed = stays_out_of_clique_b(mc, n1, n2);
        c.kubectl(&["uncordon", n3])?;
        stayed?;
        for w in ["w1", "w2"] {
            wait_running(c, NS, w)?;
        }
        ensure!(
            (node_of(mc, "w1"), node_of(mc, "w2")) == (n2.clone(), n3.clone()),
            "w1 and w2 went to {} and {}, not {n2} and {n3}",
            node_of(mc, "w1"),
            node_of(mc, "w2")
        );
        let a: BTreeSet<String> = [n2.clone(), n3.clone()].into();
        wait_ready_on(mc, "d1", &a)?;
        delete_all(mc, &[("d1", &uid)])
    })
}

/// With node 3 cordoned: w1 allocated on `n2` and waiting, w2 unschedulable, for [`STAYS`],
/// and no claim of `n1` (clique B).
fn stays_out_of_clique_b(
    mc: &graft_integration::cluster::multi::MultiCluster,
    n1: &str,
    n2: &str,
) -> anyhow::Result<()> {
    let c = &mc.cluster;
    c.apply(&template_pod(NS, "w1", "d1-channel", None))?;
    let pools = || claim_pools(mc);
    wait_until("w1's channel was not allocated", || {
        Ok(pools()?.lines().any(|l| l.starts_with("w1-")))
    })?;
    ensure!(
        pools()?
            .lines()
            .any(|l| l.starts_with("w1-") && l.ends_with(&format!("={n2}"))),
        "w1's channel is not {n2}'s: {}",
        pools()?
    );
    c.apply(&template_pod(NS, "w2", "d1-channel", None))?;
    let reason = |what: &str| {
        c.kubectl(&[
            "-n",
            NS,
            "get",
            "pod",
            "w2",
            "-o",
            &format!("jsonpath={{.status.conditions[?(@.type==\"PodScheduled\")].{what}}}"),
        ])
        .unwrap_or_default()
    };
    wait_until("w2 was not found unschedulable", || {
        Ok(reason("reason") == "Unschedulable")
    })?;
    let message = reason("message");
    ensure!(!message.is_empty(), "w2 is unschedulable without a message");
    // It stays so: not on node 1, whose channel (clique B) stays free; and w1 is not bound
    // to a domain that cannot form.
    stay_pending(mc, &["w1", "w2"], &format!("({message})"), || Ok(()))?;
    let held = pools()?;
    ensure!(
        !held.lines().any(|l| l.ends_with(&format!("={n1}"))),
        "a claim holds a channel of {n1} (clique B):\n{held}"
    );
    eprintln!("w2 stayed Pending {STAYS:?}, w1 unbound: {message}");
    Ok(())
}

/// Two two-node domains on the same two nodes (two channels each): a node runs one
/// domain's IMEX daemon at a time, so the second domain's daemons are refused there (naming
/// the domain that holds the node) and its pods wait, while the first runs Ready. Once the
/// first domain's pods are gone (and with them its daemons), the second's daemons start,
/// it turns Ready, and its pods get their own channel, the same on both nodes and not the
/// first domain's; a container may open its own channel but not the other's (the device
/// cgroup refuses it, even through a device node it makes itself).
#[test]
fn compute_domain_two_domains_one_node() -> anyhow::Result<()> {
    on_cluster(2, |mc| {
        let c = &mc.cluster;
        let (n2, n3) = (&mc.nodes[1], &mc.nodes[2]);
        let a: BTreeSet<String> = [n2.clone(), n3.clone()].into();
        let uid1 = create_domain(mc, "d1", 2)?;
        let uid2 = create_domain(mc, "d2", 2)?;
        let pods = |list: &[(&str, &str, &String)]| {
            list.iter()
                .map(|(pod, d, node)| template_pod(NS, pod, &format!("{d}-channel"), Some(node)))
                .collect::<String>()
        };
        c.apply(&pods(&[("a1", "d1", n2), ("a2", "d1", n3)]))?;
        for p in ["a1", "a2"] {
            wait_running(c, NS, p)?;
        }
        wait_ready_on(mc, "d1", &a)?;
        let d1_channel = mc.channels_in(NS, "a1")?;

        // The second domain on the same nodes: its daemons are refused, its pods wait.
        c.apply(&pods(&[("b1", "d2", n2), ("b2", "d2", n3)]))?;
        wait_until("no refusal of d2's IMEX daemon", || {
            let events = c.kubectl(&[
                "-n",
                "graft-system",
                "get",
                "events",
                "-o",
                "jsonpath={.items[*].message}",
            ])?;
            Ok(events.contains("held by another ComputeDomain"))
        })?;
        let start = Instant::now();
        while start.elapsed() < STAYS {
            for p in ["b1", "b2"] {
                ensure!(phase(c, NS, p) == "Pending", "{p} is {}", phase(c, NS, p));
            }
            ensure!(
                !is_ready(&mc.domain(NS, "d2")?),
                "d2 turned Ready beside d1"
            );
            std::thread::sleep(Duration::from_secs(1));
        }

        // The first domain's pods gone: the nodes are the second's.
        c.kubectl(&["-n", NS, "delete", "pod", "a1", "a2", "--wait=true"])?;
        for p in ["b1", "b2"] {
            wait_running(c, NS, p)?;
        }
        wait_ready_on(mc, "d2", &a)?;
        let ch: Vec<Vec<String>> = ["b1", "b2"]
            .iter()
            .map(|p| mc.channels_in(NS, p))
            .collect::<anyhow::Result<_>>()?;
        ensure!(
            ch[0].len() == 1 && ch[0] == ch[1],
            "d2's pods: {:?} / {:?}",
            ch[0],
            ch[1]
        );
        ensure!(ch[0] != d1_channel, "both domains have {:?}", ch[0]);
        daemons_see_each_other(mc, &uid2, &a)?;

        // Opening a channel with no driver behind it (this host has none) fails with ENXIO
        // once the device cgroup lets it through, with EPERM when the cgroup refuses.
        let minor = |name: &str| name.trim_start_matches("channel").parse::<u32>();
        let first = d1_channel.first().map(String::as_str).unwrap_or_default();
        let (own, other) = (minor(&ch[0][0])?, minor(first)?);
        let probe = format!(
            "cat {CHANNEL_DIR}/channel{own} 2>&1 | sed 's/^/OWN /'; \
             mknod /tmp/other c {IMEX_MAJOR} {other} && cat /tmp/other 2>&1 | sed 's/^/OTHER /'; true"
        );
        let out = mc.exec(NS, "b1", "app", &["/bin/sh", "-c", &probe])?;
        ensure!(
            out.contains("OWN") && out.contains("No such device or address"),
            "b1 could not reach its own channel {own}:\n{out}"
        );
        ensure!(
            out.lines()
                .any(|l| l.starts_with("OTHER") && l.contains("Operation not permitted")),
            "b1 was not refused d1's channel {other}:\n{out}"
        );
        delete_all(mc, &[("d1", &uid1), ("d2", &uid2)])
    })
}

/// A two-node domain's pods are bound only once the domain's IMEX daemons are Ready on
/// their nodes (DRA binding conditions): the scheduler says it waits, the claims' channels
/// say Ready, no prepare refuses or waits; the time from creation to Running is printed
/// beside two pods without claims on the same nodes.
#[test]
fn compute_domain_binds_when_ready() -> anyhow::Result<()> {
    on_cluster(1, binding::binds_when_ready)
}

/// A two-node domain's pods in one gang (a PodGroup of Kubernetes 1.37, minCount 2) with
/// room for only one: neither is bound nor holds a channel until both have a place, then
/// both run and the domain turns Ready (gangs.rs).
#[test]
fn compute_domain_gang_admitted_together() -> anyhow::Result<()> {
    on_cluster(1, gangs::admitted_together)
}

/// Four pods of a two-node domain, two on each node: the channel (the domain's slot) is
/// allocated to every one of their claims, each container gets it, and the domain runs one
/// IMEX daemon per node.
/// An elastic domain (`numNodes: 0`): Ready with its first pod's node alone, joined by a
/// second pod's node without restarting the first node's `nvidia-imex`.
#[test]
fn compute_domain_elastic() -> anyhow::Result<()> {
    on_cluster(1, elastic::grows)
}

#[test]
fn compute_domain_two_pods_per_node() -> anyhow::Result<()> {
    on_cluster(1, binding::two_pods_per_node)
}

/// A one-node domain goes to clique B (node 1, the smallest clique with room). Node 1's
/// GPUs taken, the domain's first pod (a channel and a GPU) finds no room there: before any
/// claim of it is allocated the domain moves to clique A (a CliqueChanged Event), its claim
/// is made again from the new template, and the pod runs in A. A new domain, node 1 still
/// full, goes to A from the start.
#[test]
fn compute_domain_clique_follows_free_gpus() -> anyhow::Result<()> {
    on_cluster(1, cliques::clique_follows_free_gpus)
}

/// A Ready two-node domain loses a node (its kubelet stopped): the domain turns NotReady
/// with a NotReady Event, and Ready again when the kubelet is back; deleting the pods and
/// the domain leaves no node label, claim, claim template, DaemonSet, daemon pod or claim
/// record behind.
#[test]
fn compute_domain_node_loss_and_cleanup() -> anyhow::Result<()> {
    on_cluster(1, |mc| {
        let c = &mc.cluster;
        let uid = create_domain(mc, "d1", 2)?;
        c.apply(
            &(template_pod(NS, "w1", "d1-channel", None)
                + &template_pod(NS, "w2", "d1-channel", None)),
        )?;
        for w in ["w1", "w2"] {
            wait_running(c, NS, w)?;
        }
        let a: BTreeSet<String> = mc.nodes[1..].iter().cloned().collect();
        wait_ready_on(mc, "d1", &a)?;

        let lost = &mc.nodes[2];
        mc.stop_kubelet(lost)?;
        let start = Instant::now();
        let mut events;
        loop {
            let d = mc.domain(NS, "d1")?;
            events = mc.domain_events(NS, "d1")?;
            if !is_ready(&d)
                && !ready_nodes(&d).contains(lost)
                && events.lines().any(|l| l.starts_with("NotReady:"))
            {
                break;
            }
            ensure!(
                start.elapsed() < NODE_LOSS,
                "no NotReady after {lost} was lost:\n{d:#}\n{events}"
            );
            std::thread::sleep(Duration::from_secs(1));
        }
        eprintln!(
            "{lost} lost: NotReady after {:?}:\n{events}",
            start.elapsed()
        );
        mc.start_kubelet(lost)?;
        let start = Instant::now();
        while !is_ready(&mc.domain(NS, "d1")?) {
            ensure!(
                start.elapsed() < NODE_LOSS,
                "d1 not Ready again after {lost} came back"
            );
            std::thread::sleep(Duration::from_secs(1));
        }
        delete_all(mc, &[("d1", &uid)])
    })
}

/// A two-node domain on nodes 2 and 3, node 1 moved into their clique: node 3's kubelet
/// stops and its pod is deleted, a new pod of the domain goes to node 1. The domain turns
/// Ready on nodes 1 and 2, and node 2's IMEX daemon was never restarted: same pod, no
/// container restart, nvidia-imex started once, its peer's name mapped anew.
#[test]
fn compute_domain_node_replaced_without_restarting_survivors() -> anyhow::Result<()> {
    on_cluster(1, replace::node_replaced)
}

/// The shared cluster taken down after the other tests (libtest runs them in name order; run
/// alone, it brings one up): no network namespace, link, mount, node process, cgroup or
/// directory of the testbed is left on the host.
#[test]
fn the_three_nodes_go_down_leaving_nothing() -> anyhow::Result<()> {
    down_leaving_nothing()
}
