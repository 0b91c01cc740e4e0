//! compute_domain_elastic: a domain of `numNodes: 0` takes the nodes its pods land on. Its
//! first pod runs with the domain Ready on that node alone; a second pod on another node
//! joins it, both daemons see each other, and the first node's `nvidia-imex` was never
//! restarted (the list holds a rack's names from the start; the newcomer's is mapped).

use std::collections::BTreeSet;
use std::time::Instant;

use anyhow::ensure;
use graft_integration::cluster::multi::domains::template_pod;
use graft_integration::cluster::multi::MultiCluster;
use graft_integration::cluster::workloads::wait_running;

use super::replace::daemon_log;
use super::setup::*;

pub(super) fn grows(mc: &MultiCluster) -> anyhow::Result<()> {
    let c = &mc.cluster;
    let (n2, n3) = (&mc.nodes[1], &mc.nodes[2]);
    let start = Instant::now();
    let uid = create_domain(mc, "d1", 0)?;
    c.apply(&template_pod(NS, "w1", "d1-channel", Some(n2)))?;
    wait_running(c, NS, "w1")?;
    wait_ready_on(mc, "d1", &BTreeSet::from([n2.clone()]))?;
    eprintln!(
        "an elastic domain's first pod ran, Ready on {n2} alone, after {:?}",
        start.elapsed()
    );
    let (first, _) = daemon_log(mc, &uid, n2)?;
    let table = mc.imex_table(&uid, n2)?;
    let listed = table.lines().filter(|l| l.starts_with("Node #")).count();
    ensure!(
        listed == 18,
        "the list holds {listed} names, not a rack's 18:\n{table}"
    );

    let start = Instant::now();
    c.apply(&template_pod(NS, "w2", "d1-channel", Some(n3)))?;
    wait_running(c, NS, "w2")?;
    let both = BTreeSet::from([n2.clone(), n3.clone()]);
    wait_ready_on(mc, "d1", &both)?;
    eprintln!("its second pod ran on {n3} after {:?}", start.elapsed());
    daemons_see(mc, &uid, &both, false)?;
    let (pod, log) = daemon_log(mc, &uid, n2)?;
    ensure!(
        pod == first,
        "{n2}'s IMEX daemon pod changed: {first} -> {pod}"
    );
    ensure!(
        log.matches("nvidia-imex started").count() == 1
            && !log.contains("restarting nvidia-imex")
            && log.contains("names mapped anew"),
        "{n2}'s nvidia-imex was restarted (or never remapped):\n{log}"
    );
    delete_all(mc, &[("d1", &uid)])
}
