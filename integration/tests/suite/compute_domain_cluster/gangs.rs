//! compute_domain_gang_admitted_together: a domain's pods admitted as one gang by
//! Kubernetes' own gang scheduling (1.37: a standalone `scheduling.k8s.io/v1beta1`
//! PodGroup, pods joining it through `spec.schedulingGroup`; GenericWorkload, beta and off,
//! turned on by the testbed's cluster.sh), the way docs/compute-domains.md recommends.

use std::collections::BTreeSet;
use std::time::Instant;

use anyhow::ensure;
use graft_integration::cluster::multi::domains::{template_pod, STAYS};
use graft_integration::cluster::multi::MultiCluster;
use graft_integration::cluster::workloads::wait_running;

use super::setup::*;

const GANG: &str = "d1-gang";

/// The gang: both of the domain's pods or none.
fn pod_group() -> String {
    format!(
        "apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\n\
         metadata: {{name: {GANG}, namespace: {NS}}}\n\
         spec:\n  schedulingPolicy:\n    gang: {{minCount: 2}}\n"
    )
}

/// The domain's pod `name`, a member of the gang.
fn member(name: &str) -> String {
    template_pod(NS, name, "d1-channel", None).replacen(
        "\nspec:\n",
        &format!("\nspec:\n  schedulingGroup: {{podGroupName: {GANG}}}\n"),
        1,
    )
}

/// A two-node domain's two pods in one gang, with node 3 cordoned so that only one of them
/// has a place: neither is bound and no channel is allocated to either (unlike
/// compute_domain_stays_in_one_clique without a gang, where the first holds node 2's
/// channel while it waits); once node 3 takes pods again both are placed together, run on
/// nodes 2 and 3, and the domain turns Ready.
pub(super) fn admitted_together(mc: &MultiCluster) -> anyhow::Result<()> {
    let c = &mc.cluster;
    let uid = create_domain(mc, "d1", 2)?;
    let (n2, n3) = (&mc.nodes[1], &mc.nodes[2]);
    c.apply(&pod_group())?;
    c.kubectl(&["cordon", n3])?;
    let waited = waits_whole(mc);
    c.kubectl(&["uncordon", n3])?;
    waited?;
    let start = Instant::now();
    for w in ["w1", "w2"] {
        wait_running(c, NS, w)?;
    }
    let on: BTreeSet<String> = ["w1", "w2"].iter().map(|w| node_of(mc, w)).collect();
    let a: BTreeSet<String> = [n2.clone(), n3.clone()].into();
    ensure!(on == a, "the gang runs on {on:?}, not on {a:?}");
    eprintln!(
        "the gang ran {:.1} s after node 3 was uncordoned",
        start.elapsed().as_secs_f64()
    );
    wait_ready_on(mc, "d1", &a)?;
    // The group's finalizer (podgroup-protection) holds it until its pods are gone.
    delete_all(mc, &[("d1", &uid)])?;
    c.kubectl(&["-n", NS, "delete", "podgroup", GANG, "--wait=true"])?;
    Ok(())
}

/// Both members created with one place for two: for [`STAYS`] neither is bound or holds a
/// channel; what `kubectl describe` shows of them is printed.
fn waits_whole(mc: &MultiCluster) -> anyhow::Result<()> {
    let c = &mc.cluster;
    c.apply(&(member("w1") + &member("w2")))?;
    stay_pending(mc, &["w1", "w2"], "of an incomplete gang", || {
        let held = claim_pools(mc)?;
        ensure!(
            held.lines().all(|l| l.ends_with('=')),
            "a claim of an incomplete gang holds a channel:\n{held}"
        );
        Ok(())
    })?;
    let seen = c.kubectl(&[
        "-n",
        NS,
        "get",
        "pod",
        "w2",
        "-o",
        "jsonpath={.status.conditions}",
    ])?;
    let events = c.kubectl(&[
        "-n",
        NS,
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=w2",
        "-o",
        "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
    ])?;
    eprintln!("w1 and w2 stayed Pending {STAYS:?}, no channel held; w2: {seen}\n{events}");
    Ok(())
}
