//! With the nvidia backend on, graft runs as two DaemonSets that split the nodes: the GPU
//! nodes' (`graft-gpu`: privileged, the host's root at /host, the nvidia backend) and every
//! other node's (`graft`: unprivileged, no host root). The rendered objects are read as
//! data, and their nodeSelector and node affinity evaluated against sample nodes the way
//! the scheduler does (Kubernetes' "Assigning Pods to Nodes": a pod fits a node that has
//! every nodeSelector label and matches any one required nodeSelectorTerm, a term when all
//! of its expressions hold; NotIn holds for a node without the key).

use std::collections::BTreeMap;

use anyhow::{ensure, Context};
use graft_integration::Testbed;
use serde_json::Value;

use super::chart;

/// The chart's objects as JSON values.
pub(super) fn render(tb: &Testbed, args: &[&str]) -> anyhow::Result<Vec<Value>> {
    let text = tb.render_chart(args)?;
    let mut out = Vec::new();
    for doc in text.split("\n---\n") {
        let v: serde_norway::Value = serde_norway::from_str(doc).context("rendered YAML")?;
        let v = serde_json::to_value(v)?;
        if v.get("kind").is_some() {
            out.push(v);
        }
    }
    Ok(out)
}

/// The object of `kind` named `name`, if rendered.
pub(super) fn find<'a>(objs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objs.iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

type Labels = BTreeMap<&'static str, &'static str>;

/// Whether a node requirement (`{key, operator, values}`) holds for `node`.
fn requirement(req: &Value, node: &Labels) -> bool {
    let key = req["key"].as_str().unwrap_or_default();
    let values: Vec<&str> = req["values"]
        .as_array()
        .map(|v| v.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let have = node.get(key);
    match req["operator"].as_str() {
        Some("In") => have.is_some_and(|h| values.contains(h)),
        Some("NotIn") => !have.is_some_and(|h| values.contains(h)),
        Some("Exists") => have.is_some(),
        Some("DoesNotExist") => have.is_none(),
        _ => false,
    }
}

/// Whether a DaemonSet's pods fit `node` (its nodeSelector and required node affinity).
fn fits(ds: &Value, node: &Labels) -> bool {
    let spec = &ds["spec"]["template"]["spec"];
    let selected = spec["nodeSelector"].as_object().is_none_or(|sel| {
        sel.iter()
            .all(|(k, v)| node.get(k.as_str()).copied() == v.as_str())
    });
    let terms = &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    let affine = terms.as_array().is_none_or(|terms| {
        terms.iter().any(|t| {
            t["matchExpressions"]
                .as_array()
                .is_none_or(|e| e.iter().all(|r| requirement(r, node)))
        })
    });
    selected && affine
}

/// Whether `selector`'s matchLabels all hold for the pod template of `ds`.
fn selects(selector: &Value, ds: &Value) -> bool {
    let labels = &ds["spec"]["template"]["metadata"]["labels"];
    selector["matchLabels"]
        .as_object()
        .is_some_and(|m| m.iter().all(|(k, v)| &labels[k] == v))
}

/// `(plain, gpu)` DaemonSets of a rendering with the GPU values and `more`.
fn pools(tb: &Testbed, more: &[&str]) -> anyhow::Result<(Value, Value, Vec<Value>)> {
    let gpu_values = chart().join("values-gpu.yaml");
    let mut args = vec!["-f", gpu_values.to_str().context("path")?];
    args.extend(more);
    let objs = render(tb, &args)?;
    let plain = find(&objs, "DaemonSet", "graft").context("no DaemonSet graft")?;
    let gpu = find(&objs, "DaemonSet", "graft-gpu").context("no DaemonSet graft-gpu")?;
    Ok((plain.clone(), gpu.clone(), objs))
}

fn containers(ds: &Value) -> Vec<&Value> {
    ds["spec"]["template"]["spec"]["containers"]
        .as_array()
        .map(|c| c.iter().collect())
        .unwrap_or_default()
}

fn env<'a>(ctr: &'a Value, name: &str) -> Option<&'a str> {
    ctr["env"].as_array()?.iter().find(|e| e["name"] == name)?["value"].as_str()
}

#[test]
fn privilege_and_the_host_root_reach_gpu_nodes_only() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let (plain, gpu, objs) = pools(&tb, &["--set", "nvidia.mps=all"])?;
    // The other nodes' DaemonSet: nothing privileged, no host root, no nvidia backend.
    for c in containers(&plain) {
        ensure!(c["securityContext"]["privileged"] != true, "{c:#}");
        ensure!(
            c["securityContext"]["capabilities"]["drop"][0] == "ALL",
            "{c:#}"
        );
        ensure!(env(c, "GRAFT_NVIDIA_DRIVER_ROOT").is_none(), "{c:#}");
    }
    let vols = plain["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .context("volumes")?;
    ensure!(
        vols.iter().all(|v| v["hostPath"]["path"] != "/"),
        "host root mounted: {plain:#}"
    );
    ensure!(env(containers(&plain)[0], "GRAFT_DISCOVERY") == Some("char,files"));
    // The GPU nodes': graft-driver privileged with the host root, the nvidia backend on.
    let driver = containers(&gpu)[0];
    ensure!(
        driver["securityContext"]["privileged"] == true,
        "{driver:#}"
    );
    ensure!(env(driver, "GRAFT_DISCOVERY") == Some("char,files,nvidia"));
    let gvols = gpu["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .context("volumes")?;
    ensure!(
        gvols.iter().any(|v| v["hostPath"]["path"] == "/"),
        "{gpu:#}"
    );
    ensure!(containers(&gpu)[1]["securityContext"]["privileged"] != true);
    // Same service account and surge rollouts; selectors that keep the GPU DaemonSet to its
    // own pods, which still carry the name every tool finds graft's pods by.
    for ds in [&plain, &gpu] {
        ensure!(ds["spec"]["template"]["spec"]["serviceAccountName"] == "graft");
        ensure!(ds["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"] == 1);
        ensure!(ds["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "graft");
    }
    ensure!(!selects(&gpu["spec"]["selector"], &plain), "{gpu:#}");
    ensure!(selects(&gpu["spec"]["selector"], &gpu), "{gpu:#}");
    // graft-mps goes where the GPU DaemonSet goes.
    let mps = find(&objs, "DaemonSet", "graft-mps").context("no graft-mps")?;
    for key in ["nodeSelector", "affinity"] {
        ensure!(
            mps["spec"]["template"]["spec"][key] == gpu["spec"]["template"]["spec"][key],
            "{mps:#}"
        );
    }
    // Without the nvidia backend: one DaemonSet, everywhere, unprivileged.
    let objs = render(&tb, &[])?;
    ensure!(find(&objs, "DaemonSet", "graft-gpu").is_none());
    let only = find(&objs, "DaemonSet", "graft").context("no graft")?;
    ensure!(
        only["spec"]["template"]["spec"]["affinity"].is_null(),
        "{only:#}"
    );
    Ok(())
}

const GFD: &str = "nvidia.com/gpu.present";
const NFD: &str = "feature.node.kubernetes.io/pci-10de.present";

/// A GPU node is found by the label NVIDIA's GPU feature discovery (and GPU Operator) sets or
/// by Node Feature Discovery's PCI vendor label, either one; a node with neither (or with
/// them false) runs the plain DaemonSet. The old AND-selector value is refused by name.
#[test]
fn gpu_nodes_are_found_by_the_gpu_operators_or_nfds_label() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let (plain, gpu, _) = pools(&tb, &[])?;
    let os = ("kubernetes.io/os", "linux");
    for (labels, on_gpu) in [
        (vec![os], false),
        (vec![os, (GFD, "true")], true),
        (vec![os, (NFD, "true")], true),
        (vec![os, (GFD, "true"), (NFD, "true")], true),
        (vec![os, (GFD, "false")], false),
        (vec![os, (GFD, "false"), (NFD, "false")], false),
    ] {
        let node: Labels = labels.into_iter().collect();
        ensure!(fits(&gpu, &node) == on_gpu, "gpu on {node:?}: {gpu:#}");
        ensure!(
            fits(&plain, &node) != on_gpu,
            "plain on {node:?}: {plain:#}"
        );
    }
    // A default dropped (null) no longer marks GPU nodes.
    let (plain, gpu, _) = pools(
        &tb,
        &[
            "--set-json",
            &format!(r#"nvidia.gpuNodeLabels={{"{NFD}":null}}"#),
        ],
    )?;
    let nfd_only: Labels = [os, (NFD, "true")].into_iter().collect();
    ensure!(!fits(&gpu, &nfd_only) && fits(&plain, &nfd_only), "{gpu:#}");
    let err = pools(&tb, &["--set", "nvidia.gpuNodeSelector.pool=gpu"])
        .err()
        .context("the old gpuNodeSelector value was accepted")?;
    ensure!(
        format!("{err:#}").contains("nvidia.gpuNodeSelector is now nvidia.gpuNodeLabels"),
        "{err:#}"
    );
    Ok(())
}

/// Every node runs exactly one of the two (when it runs graft at all), with GPU labels of
/// its own (either one makes a GPU node) beside an affinity of two terms.
#[test]
fn the_two_daemonsets_never_share_a_node() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let os = ("kubernetes.io/os", "linux");
    let (plain, gpu, _) = pools(
        &tb,
        &[
            "--set-json",
            &format!(r#"nvidia.gpuNodeLabels={{"{GFD}":null,"{NFD}":null,"x":"1","y":"2"}}"#),
            "--set-json",
            r#"affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"pool","operator":"In","values":["a"]}]},{"matchExpressions":[{"key":"pool","operator":"In","values":["b"]}]}]}}}"#,
        ],
    )?;
    let mut seen = 0;
    for pool in [None, Some("a"), Some("b"), Some("c")] {
        for x in [None, Some("1"), Some("2")] {
            for y in [None, Some("2"), Some("3")] {
                let mut node: Labels = [os].into_iter().collect();
                for (k, v) in [("pool", pool), ("x", x), ("y", y)] {
                    if let Some(v) = v {
                        node.insert(k, v);
                    }
                }
                let pooled = matches!(pool, Some("a" | "b"));
                let gpu_node = x == Some("1") || y == Some("2");
                ensure!(fits(&gpu, &node) == (pooled && gpu_node), "gpu on {node:?}");
                ensure!(
                    fits(&plain, &node) == (pooled && !gpu_node),
                    "plain on {node:?}"
                );
                seen += 1;
            }
        }
    }
    ensure!(seen == 36);
    // No GPU labels: every node is a GPU node, and the plain DaemonSet is not rendered.
    let objs = render(
        &tb,
        &[
            "-f",
            chart().join("values-gpu.yaml").to_str().context("path")?,
            "--set",
            "nvidia.gpuNodeLabels=null",
        ],
    )?;
    ensure!(find(&objs, "DaemonSet", "graft").is_none());
    ensure!(find(&objs, "DaemonSet", "graft-gpu").is_some());
    // nvidia the only backend: nothing for the other nodes to run.
    let objs = render(
        &tb,
        &[
            "-f",
            chart().join("values-gpu.yaml").to_str().context("path")?,
            "--set",
            "backends.char=false",
            "--set",
            "backends.files=false",
        ],
    )?;
    ensure!(find(&objs, "DaemonSet", "graft").is_none());
    Ok(())
}

/// No workload's selector takes another's pods (the ComputeDomain controller's, graft-mps',
/// the GPU DaemonSet's), but for the one overlap the chart keeps for upgrades: the other
/// nodes' DaemonSet's selector (app.kubernetes.io/name: graft since its first release)
/// matches the GPU DaemonSet's pods, which their ownerReferences keep apart. The metrics
/// Service selects graft's two DaemonSets' pods only.
#[test]
fn selectors_never_take_another_workloads_pods() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let (_, _, objs) = pools(
        &tb,
        &[
            "--set",
            "nvidia.mps=all",
            "--set",
            "computeDomains.enabled=true",
        ],
    )?;
    let workloads: Vec<&Value> = objs
        .iter()
        .filter(|o| o["kind"] == "DaemonSet" || o["kind"] == "Deployment")
        .collect();
    let names: Vec<&str> = workloads
        .iter()
        .filter_map(|w| w["metadata"]["name"].as_str())
        .collect();
    ensure!(
        names.len() == 4 && names.contains(&"graft-compute-domain-controller"),
        "{names:?}"
    );
    for w in &workloads {
        for other in &workloads {
            let (a, b) = (&w["metadata"]["name"], &other["metadata"]["name"]);
            let allowed = a == b || (a == "graft" && b == "graft-gpu");
            ensure!(
                selects(&w["spec"]["selector"], other) == allowed,
                "{a}'s selector and {b}'s pods"
            );
        }
        // Every workload's pods carry the recommended labels.
        let labels = &w["spec"]["template"]["metadata"]["labels"];
        ensure!(labels["app.kubernetes.io/part-of"] == "graft", "{w:#}");
        ensure!(labels["app.kubernetes.io/instance"] == "graft", "{w:#}");
    }
    let svc = find(&objs, "Service", "graft-metrics").context("no metrics Service")?;
    let service = serde_json::json!({"matchLabels": svc["spec"]["selector"]});
    for w in &workloads {
        let graft = w["metadata"]["name"] == "graft" || w["metadata"]["name"] == "graft-gpu";
        ensure!(selects(&service, w) == graft, "{w:#}");
    }
    Ok(())
}
