//! graft's ComputeDomain controller against a real kube-apiserver (no scheduler or
//! controller-manager: the tests stand in for the DaemonSet controller, making the daemon
//! pods and setting their readiness through the API). A domain gets its workload template
//! (channels of its clique only, its slot's channel, its uid in graft's config) and its
//! DaemonSet (its slot's IMEX ports); the clique is chosen with room, the slot free in it
//! (`slots`); status follows the daemon pods on its members and names a lost one; nodes
//! without the domain's allocated claims lose its label; a node cannot make itself a member
//! and empty domains do not squat slots (`isolation`); deletion leaves nothing; a second
//! replica waits for the Lease; a malformed domain is refused or reported. The chart's CRD
//! is the one the types generate.
//!
//! Needs the testbed (`integration/testbed/setup.sh`).

mod binding;
pub(crate) mod chart;
mod harness;
mod isolation;
mod lease;
mod slots;
mod writes;

use std::path::Path;

use anyhow::{ensure, Context as _};
use graft_compute_domain::crd::{ComputeDomain, Readiness};
use graft_compute_domain::objects::{
    daemon_name, node_label, DOMAIN_LABEL, NAMESPACE_ANNOTATION, NAME_ANNOTATION,
};
use harness::{client, controller, domain, namespaces, wait};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::resource::v1::ResourceClaimTemplate;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::ResourceExt;
use serde_json::json;

async fn status_of(
    c: &kube::Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<Option<graft_compute_domain::ComputeDomainStatus>> {
    let api: Api<ComputeDomain> = Api::namespaced(c.clone(), ns);
    Ok(api.get(name).await?.status)
}

async fn has_event(c: &kube::Client, ns: &str, name: &str, reason: &str) -> anyhow::Result<bool> {
    event_says(c, ns, name, reason, "").await
}

/// An Event of `reason` about domain `name` whose note contains `text`.
async fn event_says(
    c: &kube::Client,
    ns: &str,
    name: &str,
    reason: &str,
    text: &str,
) -> anyhow::Result<bool> {
    let api: Api<Event> = Api::namespaced(c.clone(), ns);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .any(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.note.as_deref().unwrap_or_default().contains(text)
        }))
}

/// A daemon pod of `cd` on `node`, as the DaemonSet controller would make it, then its
/// readiness as the kubelet would report it.
async fn daemon_pod(
    c: &kube::Client,
    daemons: &str,
    cd: &ComputeDomain,
    node: &str,
    ready: bool,
) -> anyhow::Result<()> {
    let uid = cd.uid().context("uid")?;
    let api: Api<Pod> = Api::namespaced(c.clone(), daemons);
    let name = format!("imex-{node}");
    if api.get_opt(&name).await?.is_none() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {DOMAIN_LABEL: uid},
                         "annotations": {NAME_ANNOTATION: cd.name_any(),
                                         NAMESPACE_ANNOTATION: cd.namespace().unwrap_or_default()}},
            "spec": {"nodeName": node, "containers": [{"name": "imex", "image": "localhost/graft:dev"}]},
        }))?;
        api.create(&PostParams::default(), &pod).await?;
    }
    let status = json!({"status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [
        {"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_in_the_chart_is_generated_from_the_types() -> anyhow::Result<()> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/helm/graft/templates/70-compute-domain-crd.yaml");
    let chart = std::fs::read_to_string(&path)?;
    ensure!(
        chart == graft_compute_domain::crd::crd_template()?,
        "{} is not what the types generate: cargo run -p graft-compute-domain -- --print-crd > deploy/helm/graft/templates/70-compute-domain-crd.yaml",
        path.display()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domain_gets_its_templates_and_daemonset() -> anyhow::Result<()> {
    let c = client().await?;
    let daemons = namespaces(&c, "cd-objects").await?;
    let _ctl = controller(&c, "cd-objects", "lease", "one");
    let cd = domain(&c, "cd-objects", "d", 2, "work").await?;
    let uid = cd.uid().context("uid")?;
    // The placement is written first (in the controller's record, so that no other
    // domain takes the slot), the objects after it, the status that reports it last.
    let dss = Api::<DaemonSet>::namespaced(c.clone(), &daemons);
    wait(|| async {
        Ok(dss.get_opt(&daemon_name(&uid)).await?.is_some()
            && status_of(&c, "cd-objects", "d")
                .await?
                .is_some_and(|s| s.slot.is_some()))
    })
    .await?;
    // Two nodes fit only u.1.
    let st = status_of(&c, "cd-objects", "d").await?.context("status")?;
    ensure!(st.clique.as_deref() == Some("u.1"), "{st:?}");
    ensure!(st.slot == Some(0), "{st:?}");
    ensure!(st.status == Readiness::NotReady, "{st:?}");

    let rct = Api::<ResourceClaimTemplate>::namespaced(c.clone(), "cd-objects")
        .get("work")
        .await?;
    let spec = serde_json::to_value(&rct.spec.spec)?;
    let req = &spec["devices"]["requests"][0]["exactly"];
    ensure!(req["deviceClassName"] == "imex-channel.graft.dev", "{spec}");
    ensure!(req["allocationMode"] == "ExactCount", "{spec}");
    let cel = req["selectors"][0]["cel"]["expression"]
        .as_str()
        .unwrap_or_default();
    ensure!(cel.contains("cliqueID") && cel.contains("'u.1'"), "{cel}");
    // Single mode: the slot's channel only.
    ensure!(
        req["selectors"][1]["cel"]["expression"]
            == "device.attributes['graft.dev'].?channel.orValue(-1) == 0",
        "{spec}"
    );
    ensure!(
        spec["devices"]["constraints"][0]["matchAttribute"] == "graft.dev/cliqueID",
        "{spec}"
    );
    let params = &spec["devices"]["config"][0]["opaque"]["parameters"];
    ensure!(
        params["kind"] == "ComputeDomainChannelConfig" && params["domainID"] == uid.as_str(),
        "{params}"
    );
    let owner = rct.owner_references().first().context("owner")?;
    ensure!(
        owner.uid == uid && owner.kind == "ComputeDomain",
        "{owner:?}"
    );

    let drct = Api::<ResourceClaimTemplate>::namespaced(c.clone(), &daemons)
        .get(&daemon_name(&uid))
        .await?;
    let dspec = serde_json::to_value(&drct.spec.spec)?;
    ensure!(
        dspec["devices"]["config"][0]["opaque"]["parameters"]["domainID"] == uid.as_str(),
        "{dspec}"
    );
    let ds = Api::<DaemonSet>::namespaced(c.clone(), &daemons)
        .get(&daemon_name(&uid))
        .await?;
    let pod = ds.spec.context("spec")?.template.spec.context("pod spec")?;
    // Placed by the members' names, not by a label a node can set on itself; with no
    // member yet, on no node (the API took the affinity: one name a field requirement).
    ensure!(pod.node_selector.is_none(), "{:?}", pod.node_selector);
    let affinity = serde_json::to_value(&pod.affinity)?;
    let terms = &affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    ensure!(
        terms.as_array().map(Vec::len) == Some(1)
            && terms[0]["matchFields"][0]["operator"] == "In"
            && terms[0]["matchFields"][1]["operator"] == "NotIn",
        "{affinity}"
    );
    let env: Vec<(String, String)> = pod.containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    for (k, v) in [
        ("GRAFT_IMEX_SERVER_PORT", "50000"),
        ("GRAFT_IMEX_CMD_PORT", "50005"),
    ] {
        ensure!(
            env.contains(&(k.into(), v.into())),
            "{k}={v} not in {env:?}"
        );
    }
    let claims = pod.resource_claims.unwrap_or_default();
    ensure!(claims[0].resource_claim_template_name.as_deref() == Some(daemon_name(&uid).as_str()));
    let got = Api::<ComputeDomain>::namespaced(c.clone(), "cd-objects")
        .get("d")
        .await?;
    ensure!(got
        .finalizers()
        .iter()
        .any(|f| f == "resource.graft.dev/compute-domain"));
    ensure!(has_event(&c, "cd-objects", "d", "CliqueChosen").await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clique_is_chosen_with_room_or_the_domain_says_why() -> anyhow::Result<()> {
    let c = client().await?;
    namespaces(&c, "cd-clique").await?;
    let _ctl = controller(&c, "cd-clique", "lease", "one");
    domain(&c, "cd-clique", "small", 1, "small").await?;
    domain(&c, "cd-clique", "big", 3, "big").await?;
    // One node: the smallest clique with room; three: none has them.
    wait(|| async {
        Ok(status_of(&c, "cd-clique", "small")
            .await?
            .and_then(|s| s.clique)
            .as_deref()
            == Some("u.2"))
    })
    .await?;
    wait(|| async {
        let m = status_of(&c, "cd-clique", "big")
            .await?
            .and_then(|s| s.message)
            .unwrap_or_default();
        Ok(m.contains("no clique has 3 nodes"))
    })
    .await?;
    ensure!(status_of(&c, "cd-clique", "big")
        .await?
        .and_then(|s| s.clique)
        .is_none());
    ensure!(has_event(&c, "cd-clique", "big", "NoClique").await?);
    let rcts = Api::<ResourceClaimTemplate>::namespaced(c.clone(), "cd-clique");
    ensure!(
        rcts.get_opt("big").await?.is_none(),
        "a template for a domain without a clique"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_follows_the_daemon_pods() -> anyhow::Result<()> {
    let c = client().await?;
    let daemons = namespaces(&c, "cd-status").await?;
    let _ctl = controller(&c, "cd-status", "lease", "one");
    let cd = domain(&c, "cd-status", "d", 2, "work").await?;
    wait(|| async {
        Ok(status_of(&c, "cd-status", "d")
            .await?
            .and_then(|s| s.clique)
            .is_some())
    })
    .await?;
    // Members: the nodes its allocated claims name (cd-c's is of the other clique).
    for n in ["cd-a", "cd-b", "cd-c"] {
        slots::claim_named(&c, &cd, &format!("work-{n}"), n).await?;
    }
    daemon_pod(&c, &daemons, &cd, "cd-a", true).await?;
    daemon_pod(&c, &daemons, &cd, "cd-b", false).await?;
    wait(|| async {
        Ok(status_of(&c, "cd-status", "d")
            .await?
            .is_some_and(|s| s.nodes.len() == 2))
    })
    .await?;
    let st = status_of(&c, "cd-status", "d").await?.context("status")?;
    ensure!(st.status == Readiness::NotReady, "{st:?}");
    ensure!(
        st.nodes[0].name == "cd-a"
            && st.nodes[0].status == Readiness::Ready
            && st.nodes[0].clique_id == "u.1",
        "{st:?}"
    );
    ensure!(st.nodes[0].ip_address == "10.0.0.1", "{st:?}");
    daemon_pod(&c, &daemons, &cd, "cd-b", true).await?;
    wait(|| async {
        Ok(status_of(&c, "cd-status", "d")
            .await?
            .is_some_and(|s| s.status == Readiness::Ready))
    })
    .await?;
    ensure!(has_event(&c, "cd-status", "d", "Ready").await?);
    let st = status_of(&c, "cd-status", "d").await?.context("status")?;
    ensure!(
        st.message.is_none(),
        "a Ready domain keeps a message: {st:?}"
    );
    // A member in the other clique: not Ready, whatever its daemon says.
    daemon_pod(&c, &daemons, &cd, "cd-c", true).await?;
    wait(|| async {
        Ok(status_of(&c, "cd-status", "d")
            .await?
            .is_some_and(|s| s.status == Readiness::NotReady))
    })
    .await?;
    let st = status_of(&c, "cd-status", "d").await?.context("status")?;
    ensure!(st
        .message
        .unwrap_or_default()
        .contains("outside clique u.1"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_leaves_nothing() -> anyhow::Result<()> {
    let c = client().await?;
    let daemons = namespaces(&c, "cd-delete").await?;
    let _ctl = controller(&c, "cd-delete", "lease", "one");
    let cd = domain(&c, "cd-delete", "d", 2, "work").await?;
    let uid = cd.uid().context("uid")?;
    let ds = Api::<DaemonSet>::namespaced(c.clone(), &daemons);
    wait(|| async { Ok(ds.get_opt(&daemon_name(&uid)).await?.is_some()) }).await?;
    // The node plugin's label, as if a workload claim had been prepared there (allocated
    // there, so that the controller keeps the label while the domain lives).
    slots::claim(&c, &cd, "cd-a").await?;
    let nodes: Api<Node> = Api::all(c.clone());
    let label = json!({"metadata": {"labels": {node_label(&uid): "true"}}});
    nodes
        .patch("cd-a", &PatchParams::default(), &Patch::Merge(&label))
        .await?;

    Api::<ComputeDomain>::namespaced(c.clone(), "cd-delete")
        .delete("d", &DeleteParams::default())
        .await?;
    let domains = Api::<ComputeDomain>::namespaced(c.clone(), "cd-delete");
    wait(|| async { Ok(domains.get_opt("d").await?.is_none()) }).await?;
    ensure!(
        ds.get_opt(&daemon_name(&uid)).await?.is_none(),
        "DaemonSet left"
    );
    let drct = Api::<ResourceClaimTemplate>::namespaced(c.clone(), &daemons);
    ensure!(
        drct.get_opt(&daemon_name(&uid)).await?.is_none(),
        "daemon template left"
    );
    let rct = Api::<ResourceClaimTemplate>::namespaced(c.clone(), "cd-delete");
    ensure!(
        rct.get_opt("work").await?.is_none(),
        "workload template left"
    );
    let a = nodes.get("cd-a").await?;
    ensure!(
        !a.labels().contains_key(&node_label(&uid)),
        "node label left: {:?}",
        a.labels()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_domain_is_refused_or_reported() -> anyhow::Result<()> {
    let c = client().await?;
    namespaces(&c, "cd-bad").await?;
    let _ctl = controller(&c, "cd-bad", "lease", "one");
    // The schema refuses what it can say: too many nodes, an unknown mode (0 is elastic).
    ensure!(
        domain(&c, "cd-bad", "huge", 1025, "work").await.is_err(),
        "numNodes 1025 accepted"
    );
    // (Untyped: the Rust types cannot even say it.)
    let ar = ApiResource::erase::<ComputeDomain>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(c.clone(), "cd-bad", &ar);
    let odd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "resource.graft.dev/v1alpha1", "kind": "ComputeDomain",
        "metadata": {"name": "odd"},
        "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "w"},
                                            "allocationMode": "Some"}}}))?;
    ensure!(
        api.create(&PostParams::default(), &odd).await.is_err(),
        "allocationMode Some accepted"
    );
    // The controller reports what the schema cannot.
    domain(&c, "cd-bad", "badname", 1, "Not_A_Name").await?;
    wait(|| async {
        let m = status_of(&c, "cd-bad", "badname")
            .await?
            .and_then(|s| s.message)
            .unwrap_or_default();
        Ok(m.contains("Not_A_Name"))
    })
    .await?;
    ensure!(has_event(&c, "cd-bad", "badname", "Invalid").await?);
    // And it can be deleted.
    let domains: Api<ComputeDomain> = Api::namespaced(c.clone(), "cd-bad");
    domains.delete("badname", &DeleteParams::default()).await?;
    wait(|| async { Ok(domains.get_opt("badname").await?.is_none()) }).await?;
    Ok(())
}
