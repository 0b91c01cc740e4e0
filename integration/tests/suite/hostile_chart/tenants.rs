//! What tenants' pods get marked with, where metrics listen, and what a refusal tells.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_integration::apiserver::ControlPlane;
use graft_integration::claims::{claim_with_pod, namespace, uid};
use graft_integration::dra_node::{prepare, DraNode};
use graft_integration::Testbed;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};

use super::{chart, install, kubectl_file, until_active};

fn pod(name: &str, annotation: Option<&str>, claims: bool, limit: Option<(&str, bool)>) -> String {
    let mut y =
        format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: tenant\n");
    if let Some(a) = annotation {
        y += &format!("  annotations: {{required-plugins.noderesource.dev/pod: {a:?}}}\n");
    }
    y += "spec:\n";
    if claims {
        y += "  resourceClaims: [{name: dev, resourceClaimTemplateName: fuse}]\n";
    }
    let resources = |r: Option<&str>| match r {
        Some(r) => format!(", resources: {{limits: {{{r}: 1}}}}"),
        None => String::new(),
    };
    match limit {
        Some((r, true)) => {
            y += &format!(
                "  initContainers: [{{name: init, image: busybox{}}}]\n",
                resources(Some(r))
            );
            y += "  containers: [{name: app, image: busybox}]\n";
        }
        Some((r, false)) => {
            y += &format!(
                "  containers: [{{name: app, image: busybox{}}}]\n",
                resources(Some(r))
            );
        }
        None => y += "  containers: [{name: app, image: busybox}]\n",
    }
    y
}

/// The pod's annotations as the API server would store it (server-side dry run: the
/// mutating policies run, nothing is stored).
fn admitted(cp: &ControlPlane, yaml: &str) -> anyhow::Result<String> {
    kubectl_file(
        cp,
        "pod.yaml",
        yaml,
        &[
            "create",
            "--dry-run=server",
            "-o",
            "jsonpath={.metadata.annotations.required-plugins\\.noderesource\\.dev/pod}",
        ],
    )
}

/// A tenant cannot opt its pod out of requireGraftNri by setting the annotation itself, and
/// a pod that asks for a graft device by extended resource (no claims at admission: the
/// scheduler makes them) is marked too.
#[test]
fn require_graft_nri_marks_every_pod_that_asks_for_devices() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let cp = super::control_plane()?;
    let yaml = tb.render_chart(&[
        "--set",
        "requireGraftNri.enabled=true",
        "--api-versions",
        "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
        "--show-only",
        "templates/60-require-graft-nri.yaml",
    ])?;
    install(cp, "require-nri.yaml", &yaml)?;
    let _ = cp.kubectl(&["create", "namespace", "tenant"]);
    let _ = cp.kubectl(&["create", "serviceaccount", "default", "-n", "tenant"]);
    let marked = "[graft, graft-validator]";
    until_active(|| Ok(admitted(cp, &pod("probe", None, true, None))? == marked))?;

    let cases = [
        (
            "claims, annotation pre-set empty",
            pod("p1", Some("[]"), true, None),
        ),
        (
            "claims, annotation pre-set to another plugin",
            pod("p2", Some("[other]"), true, None),
        ),
        (
            "claims, annotation pre-set to nothing",
            pod("p3", Some(""), true, None),
        ),
        (
            "extended resource name",
            pod("p4", None, false, Some(("graft.dev/fuse", false))),
        ),
        (
            "extended resource name, annotation pre-set",
            pod("p5", Some("[]"), false, Some(("graft.dev/tun", false))),
        ),
        (
            "the class's implicit extended resource, in an init container",
            pod(
                "p6",
                None,
                false,
                Some(("deviceclass.resource.kubernetes.io/kvm.graft.dev", true)),
            ),
        ),
    ];
    for (what, yaml) in &cases {
        let got = admitted(cp, yaml)?;
        ensure!(got == marked, "{what}: annotation {got:?}, want {marked:?}");
    }
    eprintln!("{} pods that ask for devices, all marked", cases.len());
    // Pods that ask for no device are left alone (and keep their own annotation).
    ensure!(admitted(cp, &pod("plain", None, false, None))?.is_empty());
    ensure!(
        admitted(
            cp,
            &pod("own", Some("[other]"), false, Some(("cpu", false)))
        )? == "[other]"
    );
    Ok(())
}

/// The daemons' metrics listen on the pod's IP (the node's own cluster address, with
/// hostNetwork), not on every address of the node; the probes use no port at all.
#[test]
fn metrics_listen_on_the_pods_ip_only() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    for values in [&[][..], &["-f", "values-gpu.yaml"][..]] {
        let mut args = vec!["--show-only", "templates/50-daemonset.yaml"];
        let gpu = chart().join("values-gpu.yaml");
        // Two containers per DaemonSet; with GPUs, the GPU nodes' DaemonSet too.
        let mut containers = 2;
        if !values.is_empty() {
            args.extend(["-f", gpu.to_str().context("path")?]);
            args.extend(["--show-only", "templates/51-gpu-daemonset.yaml"]);
            containers = 4;
        }
        let ds = tb.render_chart(&args)?;
        let pod_ip = "- name: POD_IP\n              valueFrom:\n                fieldRef:\n                  fieldPath: status.podIP\n";
        ensure!(ds.matches(pod_ip).count() == containers, "{ds}");
        for port in ["9477", "9478"] {
            let want =
                format!("name: GRAFT_METRICS_ADDR\n              value: \"$(POD_IP):{port}\"");
            ensure!(
                ds.matches(&want).count() == containers / 2,
                "{want:?} missing from:\n{ds}"
            );
        }
        // POD_IP comes before its use in each container: the kubelet expands only those.
        for c in ds.split("- name: graft-").skip(1) {
            if let (Some(def), Some(used)) = (c.find("name: POD_IP"), c.find("$(POD_IP)")) {
                ensure!(def < used, "{c}");
            }
        }
        ensure!(!ds.contains("httpGet") && !ds.contains("tcpSocket"), "{ds}");
    }
    Ok(())
}

/// Another namespace's claim holds the device a tenant's claim was allocated (a stale
/// allocation, a scheduler race): the tenant's claim is refused, and neither the kubelet's
/// answer (the pod's Events) nor graft's PrepareFailed Event on the claim names the
/// holder's namespace, name or uid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_names_no_claim_of_another_namespace() -> anyhow::Result<()> {
    let cp = super::control_plane()?;
    let devices = "[[devices]]\npath = \"/dev/null\"\nattributes = { type = \"test\" }\n";
    let node = DraNode::start(cp, "node-tenants", devices).await?;
    let c = &node.client;
    namespace(c, "victim-team").await?;
    namespace(c, "prober").await?;
    let (_, held) =
        claim_with_pod(c, "victim-team", "secret-project", "node-tenants", "null").await?;
    let e = &prepare(&node, &[&held]).await?[&uid(&held)].error;
    ensure!(e.is_empty(), "{e}");

    let (_, probe) = claim_with_pod(c, "prober", "probe", "node-tenants", "null").await?;
    let told = prepare(&node, &[&probe]).await?[&uid(&probe)].error.clone();
    ensure!(
        told.contains("null is already prepared for a claim of another namespace"),
        "{told}"
    );
    let hidden = ["victim-team", "secret-project", &uid(&held)];
    let start = Instant::now();
    let event = loop {
        let api: Api<Event> = Api::namespaced(c.clone(), "prober");
        let found = api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("PrepareFailed")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("probe")
            });
        if let Some(e) = found {
            break e.note.unwrap_or_default();
        }
        ensure!(
            start.elapsed() < Duration::from_secs(30),
            "no PrepareFailed Event on prober/probe"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for text in [&told, &event] {
        for h in hidden {
            ensure!(!text.contains(h), "{h:?} told to the prober: {text}");
        }
    }
    // A claim of the same namespace is named, as before.
    let (_, sibling) = claim_with_pod(c, "victim-team", "sibling", "node-tenants", "null").await?;
    let e = &prepare(&node, &[&sibling]).await?[&uid(&sibling)].error;
    ensure!(
        e.contains("prepared for claim victim-team/secret-project"),
        "{e}"
    );
    Ok(())
}
