//! Events: only as graft-driver on the node's own, about what graft reports on.

use anyhow::Context;
use graft_integration::Testbed;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams};

use super::{install_policies, kubectl_file, node_client, refused_by, until_active, GRAFT_SA};

fn event(name: &str, ns: &str, controller: &str, instance: &str, regarding: &str) -> String {
    format!(
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         eventTime: \"2026-01-01T00:00:00.000000Z\"\nreportingController: {controller}\n\
         reportingInstance: {instance}\naction: Test\nreason: Test\ntype: Normal\n\
         regarding: {regarding}\nnote: test\n"
    )
}

fn refused_event(r: anyhow::Result<String>, why: &str) -> anyhow::Result<()> {
    refused_by("graft-events-own-node", r, why)
}

/// graft-driver's reportingController now, and the one releases before it used: the policy
/// takes both (old pods still post during a rolling update), each only from its own node.
const CONTROLLER: &str = "graft.dev/graft-driver";
const OLD_CONTROLLER: &str = "graft-driver";

/// A compromised node's graft-driver tries to speak for another node or component: Events
/// about another Node, reported as another node's graft-driver (under either name) or as the
/// kubelet, about an object graft never reports on, and a patch of the kubelet's Event. All
/// refused; its own Events (on its Node, a pod, a claim) go through, and an old pod's.
#[test]
fn a_node_posts_only_its_own_events() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let cp = super::control_plane()?;
    install_policies(&tb, cp)?;
    let _ = cp.kubectl(&["create", "namespace", "events-tenant"]);
    let as_a = [
        "--as",
        GRAFT_SA,
        "--as-user-extra=authentication.kubernetes.io/node-name=node-a",
        "create",
    ];
    let node_b = "{apiVersion: v1, kind: Node, name: node-b}";
    until_active(|| {
        match kubectl_file(
            cp,
            "ev-probe.yaml",
            &event("probe", "default", CONTROLLER, "node-a", node_b),
            &as_a,
        ) {
            Ok(_) => {
                cp.kubectl(&["delete", "events.events.k8s.io", "-n", "default", "probe"])?;
                Ok(false)
            }
            Err(e) => Ok(format!("{e:#}").contains("may not post Events about node node-b")),
        }
    })?;
    // The kubelet's Event on a tenant's pod.
    let pod = "{apiVersion: v1, kind: Pod, namespace: events-tenant, name: app, uid: u1}";
    kubectl_file(
        cp,
        "ev-kubelet.yaml",
        &event("kubelets", "events-tenant", "kubelet", "node-a", pod),
        &["create"],
    )?;
    let cases = [
        (
            "another node's Node",
            event("e1", "default", CONTROLLER, "node-a", node_b),
        ),
        (
            "as another node's graft-driver",
            event("e2", "events-tenant", CONTROLLER, "node-b", pod),
        ),
        (
            "as another node's graft-driver, by its old name",
            event("e2o", "events-tenant", OLD_CONTROLLER, "node-b", pod),
        ),
        (
            "as a controller of graft.dev that is not graft-driver",
            event("e2c", "events-tenant", "graft.dev/other", "node-a", pod),
        ),
        (
            "as the kubelet",
            event("e3", "events-tenant", "kubelet", "node-a", pod),
        ),
        (
            "about a Secret",
            event(
                "e4",
                "events-tenant",
                CONTROLLER,
                "node-a",
                "{apiVersion: v1, kind: Secret, namespace: events-tenant, name: s}",
            ),
        ),
    ];
    for (why, yaml) in &cases {
        refused_event(kubectl_file(cp, "ev.yaml", yaml, &as_a), why)?;
    }
    // An old graft-driver pod during a rolling update: its own Event, by its old name.
    kubectl_file(
        cp,
        "ev-old.yaml",
        &event("old-pod", "events-tenant", OLD_CONTROLLER, "node-a", pod),
        &as_a,
    )
    .context("an old pod's Event by graft-driver's old name, on its own node")?;
    // A patch, as the recorder counts a repeat: through the API, as kubectl patch would
    // first read the Event (which graft may not).
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let graft = node_client(cp, "node-a").await?;
        let api: Api<Event> = Api::namespaced(graft.clone(), "events-tenant");
        // (An Event's other fields are immutable: its series is what a patch can change.)
        let forged = serde_json::json!({"series": {"count": 1000, "lastObservedTime": "2026-01-01T00:00:01.000000Z"}});
        refused_event(
            api.patch("kubelets", &PatchParams::default(), &Patch::Merge(&forged))
                .await
                .map(|_| String::new())
                .map_err(anyhow::Error::from),
            "patching the kubelet's Event",
        )?;
        eprintln!("{} event attacks, 0 accepted", cases.len() + 1);

        // graft-driver's own Events, through its own recorder: on its Node, a pod and a
        // claim, each posted twice (the second a patch that counts it).
        anyhow::ensure!(graft_driver::events::CONTROLLER == CONTROLLER);
        let poster = graft_driver::events::recorder(graft, "node-a");
        let ev = kube::runtime::events::Event {
            type_: kube::runtime::events::EventType::Normal,
            reason: "Test".into(),
            note: Some("own".into()),
            action: "Test".into(),
            secondary: None,
        };
        for r in [
            graft_driver::events::node_ref("node-a"),
            graft_driver::events::pod_ref("events-tenant", "app", "u1"),
            graft_driver::events::claim_ref("events-tenant", "c", "u2"),
        ] {
            for _ in 0..2 {
                poster
                    .publish(&ev, &r)
                    .await
                    .with_context(|| format!("{r:?}"))?;
            }
        }
        anyhow::Ok(())
    })
}
