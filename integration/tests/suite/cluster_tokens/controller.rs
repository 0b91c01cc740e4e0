//! graft-compute-domain-controller's ServiceAccount as a stolen token would use it
//! (`kubectl --as`, server-side dry runs, so nothing is left behind): it may run only IMEX
//! daemon DaemonSets in graft's namespace, as objects.rs builds them, and only remove (or
//! put back) domain labels on Nodes. Shared by the cluster (cluster_tokens) and the API
//! server (hostile_chart::controller) tests.

use anyhow::{ensure, Context};

use crate::hostile_chart::refused_by;
use graft_compute_domain::objects::{daemonset, DaemonConfig};
use graft_compute_domain::slot::Placement;
use graft_compute_domain::ComputeDomain;
use serde_json::{json, Value};

const NS: &str = "graft-system";
const CONTROLLER: &str = "system:serviceaccount:graft-system:graft-compute-domain-controller";
const DS_POLICY: &str = "graft-compute-domain-daemonsets";
const NODE_POLICY: &str = "graft-compute-domain-node-labels";
/// An image that is not the IMEX daemon's (the testbed's busybox).
const OTHER_IMAGE: &str = "docker.io/library/busybox:test";

/// Where the attacks go: kubectl with admin credentials, the chart's IMEX image and driver
/// root as installed, a Node (labelled `nvidia.com/gpu.present`), and graft's own DaemonSet.
pub(crate) struct Target<'a> {
    pub kubectl: &'a dyn Fn(&[&str]) -> anyhow::Result<String>,
    pub image: &'a str,
    pub driver_root: &'a str,
    pub node: &'a str,
    pub graft_daemonset: &'a str,
}

/// The IMEX daemon DaemonSet the controller would make with the chart's settings.
fn controller_daemonset(t: &Target) -> anyhow::Result<Value> {
    let cd: ComputeDomain = serde_json::from_value(json!({
        "apiVersion": "resource.graft.dev/v1alpha1", "kind": "ComputeDomain",
        "metadata": {"name": "d", "namespace": "default",
                     "uid": "0b6f3c1e-2a4d-4e8f-9a1b-3c5d7e9f1a2b"},
        "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "w"}}},
    }))?;
    let cfg = DaemonConfig {
        namespace: NS.into(),
        image: t.image.into(),
        command: vec!["/usr/bin/graft-imex-daemon".into()],
        service_account: Some("graft-imex-daemon".into()),
        driver_root: t.driver_root.into(),
        ..Default::default()
    };
    let place = Placement {
        clique: "u.1".into(),
        slot: 0,
    };
    // Placed on one member by name, as the controller places it.
    let members = std::collections::BTreeSet::from(["graft-node".to_string()]);
    Ok(serde_json::to_value(daemonset(
        &cd, &cfg, &place, &members,
    )?)?)
}

/// `kubectl --as=<controller> --dry-run=server ARGS [-f OBJ]`.
fn as_controller(t: &Target, args: &[&str], obj: Option<&Value>) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    let mut all = vec![format!("--as={CONTROLLER}"), "--dry-run=server".into()];
    all.extend(args.iter().map(|a| a.to_string()));
    if let Some(o) = obj {
        let f = dir.path().join("obj.json");
        std::fs::write(&f, serde_json::to_vec(o)?)?;
        all.extend(["-f".into(), f.to_string_lossy().into_owned()]);
    }
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    (t.kubectl)(&all)
}

/// Runs every attack; returns how many were refused (all of them, or an error).
pub(crate) fn is_held(t: &Target) -> anyhow::Result<usize> {
    let good = controller_daemonset(t)?;
    let pod = |f: &dyn Fn(&mut Value)| {
        let mut d = good.clone();
        f(&mut d["spec"]["template"]["spec"]);
        d
    };
    let privileged = pod(&|p| {
        p["containers"][0]["securityContext"] = json!({"privileged": true});
    });
    // Policies reach admission a moment after they are made.
    let start = std::time::Instant::now();
    while as_controller(t, &["create"], Some(&privileged)).is_ok() {
        ensure!(
            start.elapsed().as_secs() < 60,
            "the controller's ServiceAccount still creates a privileged DaemonSet after 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    // What the controller makes goes through.
    as_controller(t, &["create"], Some(&good)).context("the controller's own DaemonSet")?;

    let root_ds = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "root", "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "root"}}, "template": {
            "metadata": {"labels": {"app": "root"}},
            "spec": {"hostPID": true, "containers": [{"name": "c", "image": OTHER_IMAGE,
                "command": ["sleep", "3600"], "securityContext": {"privileged": true}}],
                "volumes": [{"name": "host", "hostPath": {"path": "/"}}]}}},
    });
    let c0 = |f: &dyn Fn(&mut Value)| pod(&|p| f(&mut p["containers"][0]));
    let cases: Vec<(&str, Value)> = vec![
        ("a privileged DaemonSet of its own", root_ds),
        ("privileged", privileged.clone()),
        ("another image", c0(&|c| c["image"] = json!(OTHER_IMAGE))),
        (
            "another command",
            c0(&|c| c["command"] = json!(["sh", "-c", "id"])),
        ),
        (
            "a capability",
            c0(&|c| c["securityContext"]["capabilities"]["add"] = json!(["SYS_ADMIN"])),
        ),
        (
            "capabilities kept",
            c0(&|c| c["securityContext"]["capabilities"] = json!({})),
        ),
        (
            "escalation",
            c0(&|c| c["securityContext"]["allowPrivilegeEscalation"] = json!(true)),
        ),
        ("the host's PIDs", pod(&|p| p["hostPID"] = json!(true))),
        ("no seccomp", pod(&|p| p["securityContext"] = json!({}))),
        (
            "the host's root",
            pod(&|p| p["volumes"][0]["hostPath"]["path"] = json!("/")),
        ),
        (
            "the driver root writable",
            c0(&|c| c["volumeMounts"][0]["readOnly"] = json!(false)),
        ),
        (
            "a Secret in its environment",
            c0(&|c| {
                c["env"][0] = json!({"name": "COMPUTE_DOMAIN_UID",
                "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}})
            }),
        ),
        (
            "another driver root by environment",
            c0(&|c| c["env"][0] = json!({"name": "GRAFT_DRIVER_ROOT", "value": "/x"})),
        ),
        (
            "graft-driver's ServiceAccount",
            pod(&|p| p["serviceAccountName"] = json!("graft")),
        ),
        (
            "a command in a probe",
            c0(&|c| c["livenessProbe"] = json!({"exec": {"command": ["sh", "-c", "id"]}})),
        ),
        (
            "a second container",
            pod(&|p| {
                let extra = json!({"name": "x", "image": OTHER_IMAGE});
                if let Some(cs) = p["containers"].as_array_mut() {
                    cs.push(extra);
                }
            }),
        ),
    ];
    for (why, obj) in &cases {
        refused_by(DS_POLICY, as_controller(t, &["create"], Some(obj)), why)?;
    }
    // graft's own DaemonSet (privileged in GPU mode): neither changed nor deleted.
    let own = format!("daemonset/{}", t.graft_daemonset);
    let image = format!("graft-driver={OTHER_IMAGE}");
    refused_by(
        DS_POLICY,
        as_controller(t, &["-n", NS, "set", "image", &own, &image], None),
        "graft's own DaemonSet's image",
    )?;
    refused_by(
        DS_POLICY,
        as_controller(t, &["-n", NS, "delete", &own], None),
        "deleting graft's own DaemonSet",
    )?;
    // Nodes: only domain labels go. Server-side apply: a PATCH, which is all RBAC grants
    // it (kubectl's other patches GET the Node first).
    let node = |extra: Value| {
        let mut n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": t.node}});
        if let (Some(n), Some(extra)) = (n.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                if k == "metadata" {
                    if let (Some(m), Some(more)) = (n["metadata"].as_object_mut(), v.as_object()) {
                        m.extend(more.clone());
                    }
                } else {
                    n.insert(k.clone(), v.clone());
                }
            }
        }
        n
    };
    let apply = ["apply", "--server-side", "--force-conflicts"];
    let (labels_only, domain_only) = ("may change only the labels", "may only remove or set");
    let node_cases = [
        (
            "a taint",
            node(json!({"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}})),
            labels_only,
        ),
        (
            "changing a label",
            node(json!({"metadata": {"labels": {"nvidia.com/gpu.present": "false"}}})),
            domain_only,
        ),
        (
            "adding a label",
            node(json!({"metadata": {"labels": {"x": "y"}}})),
            domain_only,
        ),
        (
            "an annotation",
            node(json!({"metadata": {"annotations": {"x": "y"}}})),
            labels_only,
        ),
    ];
    for (why, obj, message) in &node_cases {
        let r = as_controller(t, &apply, Some(obj));
        // Refused by the validation meant for it.
        if let Err(e) = &r {
            ensure!(format!("{e:#}").contains(message), "{why}: {e:#}");
        }
        refused_by(NODE_POLICY, r, why)?;
    }
    let domain = node(json!({"metadata": {"labels": {
        "resource.graft.dev/computeDomain.0b6f3c1e-2a4d-4e8f-9a1b-3c5d7e9f1a2b": "true"}}}));
    as_controller(t, &apply, Some(&domain)).context("putting a domain label back")?;
    Ok(cases.len() + 2 + node_cases.len())
}
