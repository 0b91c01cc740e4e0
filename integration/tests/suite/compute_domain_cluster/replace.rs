//! compute_domain_node_replaced_without_restarting_survivors: a member replaced changes one
//! name's address in the survivors' hosts files (compute-domain/src/daemon.rs), and their
//! nvidia-imex resolves it again on SIGUSR1 without a restart.

use std::collections::BTreeSet;

use anyhow::{ensure, Context};
use graft_integration::cluster::multi::domains::{clique_id, template_pod, GRAFT_NS};
use graft_integration::cluster::multi::MultiCluster;
use graft_integration::cluster::wait_until;
use graft_integration::cluster::workloads::wait_running;

use super::setup::*;

/// Moves node 1 into clique `clique` (its fake fabric, read by graft-driver as it starts)
/// and waits until its channels say so.
fn node1_to(mc: &MultiCluster, clique: u32) -> anyhow::Result<()> {
    let n1 = &mc.nodes[0];
    mc.fakes[0].set_fabric(Some((FABRIC, clique)))?;
    let field = format!("spec.nodeName={n1}");
    let pods = mc.cluster.kubectl(&[
        "-n",
        GRAFT_NS,
        "get",
        "pods",
        "--field-selector",
        &field,
        "-o",
        "name",
    ])?;
    for pod in pods.lines().filter(|p| p.starts_with("pod/graft-gpu-")) {
        mc.cluster
            .kubectl(&["-n", GRAFT_NS, "delete", pod, "--wait=true"])?;
    }
    let want = format!("\"{}\"", clique_id(FABRIC, clique));
    wait_until(
        &format!("{n1}'s channels are not in clique {clique}"),
        || {
            let slices = mc.slices(n1)?;
            Ok(slices.contains("\"imex-channel-") && slices.contains(&want))
        },
    )?;
    Ok(())
}

/// The log of the IMEX daemon pod of domain `uid` on `node`, and that pod's name.
pub(super) fn daemon_log(
    mc: &MultiCluster,
    uid: &str,
    node: &str,
) -> anyhow::Result<(String, String)> {
    let pod = mc
        .daemon_pod(uid, node)?
        .with_context(|| format!("no IMEX daemon on {node}"))?;
    let log = mc.cluster.kubectl(&["-n", GRAFT_NS, "logs", &pod])?;
    Ok((pod, log))
}

pub(super) fn node_replaced(mc: &MultiCluster) -> anyhow::Result<()> {
    node1_to(mc, CLIQUE_A)?;
    let replaced = replace_a_member(mc);
    let restored = node1_to(mc, CLIQUE_B);
    replaced?;
    restored
}

fn replace_a_member(mc: &MultiCluster) -> anyhow::Result<()> {
    let c = &mc.cluster;
    let (n1, n2, n3) = (&mc.nodes[0], &mc.nodes[1], &mc.nodes[2]);
    let uid = create_domain(mc, "d1", 2)?;
    c.apply(
        &(template_pod(NS, "w1", "d1-channel", Some(n2))
            + &template_pod(NS, "w2", "d1-channel", Some(n3))),
    )?;
    for w in ["w1", "w2"] {
        wait_running(c, NS, w)?;
    }
    wait_ready_on(mc, "d1", &BTreeSet::from([n2.clone(), n3.clone()]))?;
    let (survivor, before) = daemon_log(mc, &uid, n2)?;

    // Node 3 lost for good: its kubelet stops and its pod is taken off it; a new pod of the
    // domain goes to node 1.
    mc.stop_kubelet(n3)?;
    let replaced = (|| -> anyhow::Result<()> {
        c.kubectl(&[
            "-n",
            NS,
            "delete",
            "pod",
            "w2",
            "--force",
            "--grace-period=0",
        ])?;
        c.apply(&template_pod(NS, "w3", "d1-channel", Some(n1)))?;
        let took = wait_running(c, NS, "w3")?;
        wait_ready_on(mc, "d1", &BTreeSet::from([n1.clone(), n2.clone()]))?;
        eprintln!("the new member's pod ran after {took:?}");
        Ok(())
    })();
    mc.start_kubelet(n3)?;
    replaced?;

    let (pod, after) = daemon_log(mc, &uid, n2)?;
    ensure!(
        pod == survivor,
        "{n2}'s IMEX daemon pod changed: {survivor} -> {pod}"
    );
    let restarts = c.kubectl(&[
        "-n",
        GRAFT_NS,
        "get",
        "pod",
        &pod,
        "-o",
        "jsonpath={.status.containerStatuses[0].restartCount}",
    ])?;
    ensure!(restarts.trim() == "0", "{pod} restarted {restarts} times");
    ensure!(
        after.matches("nvidia-imex started").count() == 1
            && !after.contains("restarting nvidia-imex")
            && after.contains("names mapped anew"),
        "{n2}'s nvidia-imex was restarted (or never remapped):\n{after}\n(before:\n{before})"
    );
    daemons_see_each_other(mc, &uid, &BTreeSet::from([n1.clone(), n2.clone()]))?;
    delete_all(mc, &[("d1", &uid)])
}
