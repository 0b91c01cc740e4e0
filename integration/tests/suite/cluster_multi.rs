//! The multi-node testbed (integration/testbed/cluster/nodes.sh, harness
//! `graft_integration::cluster::multi`): three nodes on this machine, graft installed once
//! from the chart in GPU mode, each node with its own fake NVIDIA node and fabric clique.
//! Needs root, the testbed and the workspace binaries, as cluster_e2e does; takes its turn
//! on the host's one testbed cluster through the GPU bed's lock.

use anyhow::{ensure, Context};
use graft_integration::cluster::multi::MultiCluster;
use graft_integration::cluster::wait_until;
use graft_integration::cluster::workloads::{claim_template, wait_log, BUSYBOX};
use serde_json::Value;

/// Two NVLink fabric cliques: nodes 1 and 2 in A, node 3 in B.
const FABRIC_UUID: &str = "5c0ffee0aa55aa55aa55aa55aa55aa55";
const CLIQUE_A: u32 = 11;
const CLIQUE_B: u32 = 22;

/// A pod on `node` whose container gets one IMEX channel through claim template `name`.
fn imex_pod(name: &str, node: &str) -> String {
    claim_template(name, "imex-channel.graft.dev", None)
        + &format!(
            r#"---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  terminationGracePeriodSeconds: 1
  nodeSelector: {{kubernetes.io/hostname: {node}}}
  resourceClaims: [{{name: dev, resourceClaimTemplateName: {name}}}]
  containers:
  - name: app
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "ls /dev/nvidia-caps-imex-channels/; echo DONE; sleep 3600"]
    resources: {{claims: [{{name: dev}}]}}
"#
        )
}

/// The cliqueID attribute of each imex-channel device in `slices` (ResourceSlice list JSON).
fn imex_cliques(slices: &str) -> anyhow::Result<Vec<String>> {
    let v: Value = serde_json::from_str(slices)?;
    let mut out = Vec::new();
    for s in v["items"].as_array().context("no items")? {
        for d in s["spec"]["devices"].as_array().into_iter().flatten() {
            let name = d["name"].as_str().unwrap_or_default();
            if name.starts_with("imex-channel-") {
                let attrs = &d["attributes"];
                let clique = attrs["cliqueID"]["string"]
                    .as_str()
                    .or_else(|| attrs["graft.dev/cliqueID"]["string"].as_str())
                    .with_context(|| format!("{name} has no cliqueID: {attrs}"))?;
                out.push(clique.to_string());
            }
        }
    }
    Ok(out)
}

/// Three nodes join the one control plane; graft's DaemonSet runs one Ready pod on each;
/// each node publishes its own slices, its IMEX channel in its own clique; a pod pinned to
/// each node gets its channel there (graft-nri on that node); one node's kubelet stops and
/// starts again; `down` leaves nothing.
#[test]
fn multi_node_testbed_runs_graft_on_every_node() -> anyhow::Result<()> {
    let _turn = graft_integration::cluster::gpu::own_cluster();
    let mc = MultiCluster::up(3)?;
    let c = &mc.cluster;
    let ready = c.kubectl(&[
        "get",
        "nodes",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
    ])?;
    for node in &mc.nodes {
        ensure!(
            ready.lines().any(|l| l == format!("{node}=True")),
            "{node} not Ready:\n{ready}"
        );
    }

    // An extra node reaches the bridge and the API server, nothing beyond.
    let ns = mc.netns(&mc.nodes[1]).context("node 2 has no netns")?;
    let out = std::process::Command::new("ip")
        .args(["-n", &ns, "route", "get", "198.51.100.1"])
        .output()?;
    ensure!(
        !out.status.success(),
        "{ns} has a route out: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let first_ip = c.kubectl(&[
        "get",
        "node",
        &mc.nodes[0],
        "-o",
        "jsonpath={.status.addresses[?(@.type==\"InternalIP\")].address}",
    ])?;
    // ... and the first node's address (the API server listens on every address).
    let to_first = std::process::Command::new("ip")
        .args(["netns", "exec", &ns, "bash", "-c"])
        .arg(format!("exec 3<>/dev/tcp/{}/443", first_ip.trim()))
        .output()?;
    ensure!(
        to_first.status.success(),
        "{ns} cannot connect to the first node at {first_ip}: {}",
        String::from_utf8_lossy(&to_first.stderr)
    );

    mc.deploy_gpu(&[
        Some((FABRIC_UUID, CLIQUE_A)),
        Some((FABRIC_UUID, CLIQUE_A)),
        Some((FABRIC_UUID, CLIQUE_B)),
    ])?;
    let ds = c.kubectl(&[
        "-n",
        "graft-system",
        "get",
        "daemonset",
        "graft-gpu",
        "-o",
        "jsonpath={.status.numberReady}",
    ])?;
    // Every node is a GPU node here (deploy-graft.sh labels them as GPU feature discovery
    // would), so the GPU DaemonSet runs on all three.
    ensure!(
        ds == "3",
        "graft's GPU DaemonSet has {ds:?} Ready pods, not 3"
    );
    // One graft pod per node, once a rollout's old pods are gone (the GPU values replace
    // the first install's pods with a surge: for a moment a node has both).
    let mut pods = String::new();
    wait_until("not one graft pod per node", || {
        pods = c.kubectl(&[
            "-n",
            "graft-system",
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=graft",
            "-o",
            "jsonpath={range .items[*]}{.spec.nodeName}{\"\\n\"}{end}",
        ])?;
        Ok(mc
            .nodes
            .iter()
            .all(|node| pods.lines().filter(|l| l == node).count() == 1))
    })
    .with_context(|| format!("graft's pods by node:\n{pods}"))?;

    for (node, clique) in mc.nodes.iter().zip([CLIQUE_A, CLIQUE_A, CLIQUE_B]) {
        let want = format!(
            "{}-{}-{}-{}-{}.{clique}",
            &FABRIC_UUID[..8],
            &FABRIC_UUID[8..12],
            &FABRIC_UUID[12..16],
            &FABRIC_UUID[16..20],
            &FABRIC_UUID[20..]
        );
        let mut cliques = Vec::new();
        wait_until(&format!("{node} published no IMEX channel"), || {
            cliques = imex_cliques(&mc.slices(node)?)?;
            Ok(!cliques.is_empty())
        })?;
        ensure!(
            cliques.iter().all(|c| *c == want),
            "{node}'s IMEX channels are in {cliques:?}, not {want}"
        );
    }

    for (i, node) in mc.nodes.iter().enumerate() {
        let name = format!("imex-{}", i + 1);
        c.apply(&imex_pod(&name, node))?;
        c.wait_phase(&name, "Running")?;
        let on = c.kubectl(&["get", "pod", &name, "-o", "jsonpath={.spec.nodeName}"])?;
        ensure!(on == *node, "{name} runs on {on}, not {node}");
        let log = wait_log(c, &name, "app", "DONE")?;
        ensure!(log.contains("channel0"), "{name} has no channel:\n{log}");
        let label = format!("io.kubernetes.pod.name={name}");
        let ids = mc.crictl(node, &["ps", "-q", "--name", "app", "--label", &label])?;
        ensure!(
            !ids.trim().is_empty(),
            "{name}'s container is not on {node}'s containerd"
        );
    }

    // One node's kubelet stopped and started again: the API server reaches it (the node
    // proxy to its kubelet's healthz) only while it runs.
    let node = &mc.nodes[2];
    let healthz = format!("/api/v1/nodes/{node}/proxy/healthz");
    mc.stop_kubelet(node)?;
    ensure!(
        c.kubectl(&["get", "--raw", &healthz]).is_err(),
        "{node}'s kubelet still answers after stop-kubelet"
    );
    mc.start_kubelet(node)?;
    wait_until(&format!("{node}'s kubelet never answered again"), || {
        Ok(c.kubectl(&["get", "--raw", &healthz]).is_ok())
    })?;

    let left = mc.down()?;
    ensure!(left.is_empty(), "down left behind: {left:?}");
    Ok(())
}
