//! Nodes: with ComputeDomains off graft-driver may not patch a Node at all; with them on it
//! only adds its domains' labels to its own Node (policy graft-nodes-own-domain-labels).
//! One test, off then on, on the suite's API server: the other tests apply the chart's
//! defaults, which leave the ComputeDomain role (graft-driver-compute-domains) and policy
//! alone once they are there.

use std::collections::BTreeMap;

use anyhow::{bail, ensure};
use graft_integration::apiserver::ControlPlane;
use graft_integration::Testbed;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{json, Value};

use super::{install, install_policies, node_client, refused_by, GRAFT_SA};

const POLICY: &str = "graft-nodes-own-domain-labels";
const DOMAIN: &str = "resource.graft.dev/computeDomain.";
/// Domains graft-driver labels NODE_A for in the test, and one NODE_A is already in.
const UID_A: &str = "0b6f3c1e-2a4d-4e8f-9a1b-3c5d7e9f1a2b";
const UID_C: &str = "5e0c9d2b-7f41-4a63-b8e2-d1c4f6a8b0e3";
const UID_OLD: &str = "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a";
/// Other labels on NODE_A: a real node has dozens; the policy must stay within its cost.
const FILLER_LABELS: usize = 200;

const NODE_A: &str = "domain-node-a";
const NODE_B: &str = "domain-node-b";

/// Nodes NODE_A (in domain UID_OLD already, with filler labels) and NODE_B, made by an
/// admin.
fn make_nodes(cp: &ControlPlane) -> anyhow::Result<()> {
    let mut labels =
        format!("    kubernetes.io/hostname: {NODE_A}\n    {DOMAIN}{UID_OLD}: \"true\"\n");
    for i in 0..FILLER_LABELS {
        labels += &format!("    filler.example.com/label-{i:03}: value-{i:03}\n");
    }
    let nodes = format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {NODE_A}\n  labels:\n{labels}---\n\
         apiVersion: v1\nkind: Node\nmetadata:\n  name: {NODE_B}\n  labels:\n\
         \x20   kubernetes.io/hostname: {NODE_B}\n"
    );
    install(cp, "nodes.yaml", &nodes)
}

/// Whether graft's ServiceAccount may make the call `args` (`kubectl auth can-i`).
fn can(cp: &ControlPlane, args: &[&str]) -> bool {
    let as_sa = format!("--as={GRAFT_SA}");
    let mut all = vec!["auth", "can-i", as_sa.as_str()];
    all.extend_from_slice(args);
    // can-i exits 1 when the answer is no.
    cp.kubectl(&all).is_ok_and(|o| o.trim() == "yes")
}

async fn merge(api: &Api<Node>, node: &str, patch: Value) -> anyhow::Result<String> {
    api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| String::new())
        .map_err(anyhow::Error::from)
}

fn labels(patch: Value) -> Value {
    json!({"metadata": {"labels": patch}})
}

/// `Ok` when `r` was refused by RBAC (before any admission policy sees it).
fn forbidden(r: anyhow::Result<String>, why: &str) -> anyhow::Result<()> {
    match r {
        Ok(out) => bail!("accepted ({why}): {out}"),
        Err(e) => {
            let e = format!("{e:#}");
            // RBAC's refusal: `User "..." cannot patch resource "nodes" ...`.
            ensure!(
                e.contains("forbidden")
                    && e.contains(" cannot ")
                    && !e.contains("ValidatingAdmissionPolicy"),
                "refused, but not by RBAC ({why}): {e}"
            );
            Ok(())
        }
    }
}

/// With computeDomains off (the default), graft-driver may not patch a Node at all, not even
/// to add a domain label to its own. With them on, a compromised node's graft-driver tries
/// every other Node write it could make with `patch nodes`: a domain label on another node,
/// another label, a domain label that is not a uid or not "true", changing or removing a
/// label (a domain's included), a taint, unschedulable, an annotation, a good label together
/// with a bad one, the status subresource, deleting its Node. All refused, nothing changed;
/// adding its domains' labels to its own Node (merge patch, a repeat, server-side apply)
/// goes through, with two hundred other labels on the Node.
#[test]
fn a_node_only_adds_domain_labels_to_its_own_node() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let cp = super::control_plane()?;
    let rt = tokio::runtime::Runtime::new()?;
    let good = labels(json!({format!("{DOMAIN}{UID_A}"): "true"}));

    // Off: no role, no policy; RBAC refuses the patch.
    let shown = [
        "--show-only",
        "templates/10-rbac.yaml",
        "--show-only",
        "templates/20-admission-policy.yaml",
    ];
    let off = tb.render_chart(&shown)?;
    ensure!(
        !off.contains(&format!("name: {POLICY}"))
            && !off.contains("name: graft-driver-compute-domains"),
        "the ComputeDomain role or policy is rendered while off"
    );
    install_policies(&tb, cp)?;
    make_nodes(cp)?;
    ensure!(
        !can(cp, &["patch", "nodes"]),
        "graft may patch nodes while off"
    );
    rt.block_on(async {
        let nodes: Api<Node> = Api::all(node_client(cp, NODE_A).await?);
        forbidden(
            merge(&nodes, NODE_A, good.clone()).await,
            "a domain label on its own Node, ComputeDomains off",
        )
    })?;

    // On: the role, the policy, and the CRD (kubectl auth can-i does not answer for a
    // resource it cannot find).
    let mut on_args = shown.to_vec();
    on_args.extend([
        "--set",
        "computeDomains.enabled=true",
        "--show-only",
        "templates/70-compute-domain-crd.yaml",
    ]);
    install(cp, "nodes-policies.yaml", &tb.render_chart(&on_args)?)?;
    rt.block_on(async {
        let nodes: Api<Node> = Api::all(node_client(cp, NODE_A).await?);
        // Active once another node's label is refused (RBAC and the policy both arrive late).
        let mut active = false;
        let mut last = String::new();
        let start = std::time::Instant::now();
        while !active {
            match merge(&nodes, NODE_B, good.clone()).await {
                Ok(_) => {
                    cp.kubectl(&["label", "node", NODE_B, &format!("{DOMAIN}{UID_A}-")])?;
                }
                Err(e) => {
                    last = format!("{e:#}");
                    active = last.contains(&format!("may not change node {NODE_B}"));
                }
            }
            if !active {
                ensure!(
                    start.elapsed().as_secs() < 60,
                    "the policy did not take effect within 60 s: {last}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
        }
        let before: Node = Api::all(cp.client().await?).get(NODE_A).await?;

        let old = format!("{DOMAIN}{UID_OLD}");
        let (add, keep, labels_only) = (
            "may add only labels resource.graft.dev/computeDomain.<domain uid>",
            "may not remove or change labels of its Node",
            "may change only the labels of its Node",
        );
        let cases = [
            ("another label", labels(json!({"app": "x"})), add),
            (
                "a domain label of value false",
                labels(json!({format!("{DOMAIN}{UID_A}"): "false"})),
                add,
            ),
            (
                "a domain label whose uid is not one",
                labels(json!({format!("{DOMAIN}not-a-uid"): "true"})),
                add,
            ),
            (
                "a domain label with a second label",
                labels(json!({format!("{DOMAIN}{UID_A}"): "true", "app": "x"})),
                add,
            ),
            (
                "changing a domain label",
                labels(json!({&old: "false"})),
                keep,
            ),
            ("removing a domain label", labels(json!({&old: null})), keep),
            (
                "removing a label",
                labels(json!({"kubernetes.io/hostname": null})),
                keep,
            ),
            (
                "a taint",
                json!({"spec": {"taints": [{"key": "graft.dev/x", "effect": "NoSchedule"}]}}),
                labels_only,
            ),
            (
                "unschedulable",
                json!({"spec": {"unschedulable": true}}),
                labels_only,
            ),
            (
                "an annotation",
                json!({"metadata": {"annotations": {"graft.dev/x": "y"}}}),
                labels_only,
            ),
        ];
        for (why, patch, message) in &cases {
            let r = merge(&nodes, NODE_A, patch.clone()).await;
            // Refused by the validation meant for it (not an evaluation error).
            if let Err(e) = &r {
                ensure!(format!("{e:#}").contains(message), "{why}: {e:#}");
            }
            refused_by(POLICY, r, why)?;
        }
        forbidden(
            nodes
                .patch_status(NODE_A, &PatchParams::default(), &Patch::Merge(&good))
                .await
                .map(|_| String::new())
                .map_err(anyhow::Error::from),
            "the status subresource",
        )?;
        forbidden(
            nodes
                .delete(NODE_A, &DeleteParams::default())
                .await
                .map(|_| String::new())
                .map_err(anyhow::Error::from),
            "deleting its Node",
        )?;
        eprintln!("{} node attacks, 0 accepted", cases.len() + 3);
        let after: Node = Api::all(cp.client().await?).get(NODE_A).await?;
        ensure!(
            after.metadata.labels == before.metadata.labels
                && after.metadata.annotations == before.metadata.annotations
                && after.spec == before.spec,
            "{NODE_A} changed: {:?}",
            after.metadata
        );

        // graft-driver's own work: its domains' labels on its Node, added twice (a prepare
        // retried) and through server-side apply.
        merge(&nodes, NODE_A, good.clone()).await?;
        merge(&nodes, NODE_A, good.clone()).await?;
        let apply = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": NODE_A, "labels": {format!("{DOMAIN}{UID_C}"): "true"}}});
        nodes
            .patch(
                NODE_A,
                &PatchParams::apply("graft-driver"),
                &Patch::Apply(&apply),
            )
            .await?;
        let want: BTreeMap<String, String> = before
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .chain([UID_A, UID_C].map(|u| (format!("{DOMAIN}{u}"), "true".to_string())))
            .collect();
        let after: Node = Api::all(cp.client().await?).get(NODE_A).await?;
        ensure!(
            after.metadata.labels.as_ref() == Some(&want),
            "{NODE_A}'s labels: {:?}",
            after.metadata.labels
        );
        // Its clique label: set, changed and removed as its scans find the clique.
        for v in [json!("u1.3"), json!("u1.4"), json!(null)] {
            merge(
                &nodes,
                NODE_A,
                labels(json!({"resource.graft.dev/clique": v})),
            )
            .await?;
        }
        let r = merge(
            &nodes,
            NODE_A,
            labels(json!({"resource.graft.dev/clique": "u1.3", "app": "x"})),
        )
        .await;
        refused_by(POLICY, r, "the clique label with a second label")?;
        let b: Node = Api::all(cp.client().await?).get(NODE_B).await?;
        ensure!(
            !b.metadata
                .labels
                .unwrap_or_default()
                .keys()
                .any(|k| k.starts_with(DOMAIN)),
            "{NODE_B} was labelled"
        );
        anyhow::Ok(())
    })?;
    // The calls RBAC grants for it, and no more.
    for (call, want) in [
        (
            &["get", "computedomains.resource.graft.dev", "-n", "x"][..],
            true,
        ),
        (&["patch", "nodes"], true),
        (&["list", "computedomains.resource.graft.dev", "-A"], false),
        (&["update", "nodes"], false),
        (&["patch", "nodes", "--subresource=status"], false),
        (&["delete", "nodes"], false),
    ] {
        ensure!(can(cp, call) == want, "can-i {call:?} is not {want}");
    }
    Ok(())
}
