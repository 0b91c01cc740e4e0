//! What one node or one tenant can do to another's domain. A node that labels itself for a
//! victim's domain (graft-driver's credentials may set that label) and gets a daemon pod
//! there does not become a member: the DaemonSet does not place a daemon on it, the
//! victim's status and the member list its IMEX daemons get do not change, so IMEX starts
//! once however often the node flaps. Empty domains of one namespace do not keep another
//! namespace's domain from a slot.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context as _};
use graft_compute_domain::clique::channel_slice;
use graft_compute_domain::crd::{ComputeDomain, NodeStatus, Readiness};
use graft_compute_domain::daemon::{self, Plan};
use graft_compute_domain::objects::{
    daemon_name, node_label, DOMAIN_LABEL, NAMESPACE_ANNOTATION, NAME_ANNOTATION,
};
use graft_compute_domain::record;
use graft_compute_domain::SlotPolicy;
use graft_integration::claims::namespace;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, NodeSelectorRequirement, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

use super::harness::{client, controller, controller_with, domain, namespaces, wait};
use super::{has_event, status_of};

/// The node that labels itself for another's domain.
const INTRUDER: &str = "cd-join-x";

/// A claim allocated on `node` holding its `devices`, as the scheduler leaves it: a
/// workload claim of `of` (its template's label and annotations), or of no domain.
async fn held(
    c: &kube::Client,
    ns: &str,
    name: &str,
    node: &str,
    of: Option<&ComputeDomain>,
    devices: &[&str],
) -> anyhow::Result<()> {
    let api: Api<ResourceClaim> = Api::namespaced(c.clone(), ns);
    let meta = match of {
        Some(cd) => json!({"name": name, "labels": {DOMAIN_LABEL: cd.uid()},
                           "annotations": {NAME_ANNOTATION: cd.name_any(),
                                           NAMESPACE_ANNOTATION: cd.namespace()}}),
        None => json!({"name": name}),
    };
    let rc: ResourceClaim = serde_json::from_value(json!({
        "metadata": meta,
        "spec": {"devices": {"requests": [{"name": "channel",
                  "exactly": {"deviceClassName": "imex-channel.graft.dev"}}]}},
    }))?;
    api.create(&PostParams::default(), &rc).await?;
    let results: Vec<_> = devices
        .iter()
        .map(|d| json!({"request": "channel", "driver": "graft.dev", "pool": node, "device": d}))
        .collect();
    let status = json!({"status": {"allocation": {
        "devices": {"results": results},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
    }}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// A daemon pod of `cd` on `node` at `ip`, as the DaemonSet controller and the kubelet
/// would leave it.
async fn daemon_at(
    c: &kube::Client,
    daemons: &str,
    cd: &ComputeDomain,
    node: &str,
    ip: &str,
) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::namespaced(c.clone(), daemons);
    let name = format!("imex-{node}");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {DOMAIN_LABEL: cd.uid()},
                     "annotations": {NAME_ANNOTATION: cd.name_any(),
                                     NAMESPACE_ANNOTATION: cd.namespace()}},
        "spec": {"nodeName": node, "containers": [{"name": "imex", "image": "localhost/graft:dev"}]},
    }))?;
    api.create(&PostParams::default(), &pod).await?;
    let status = json!({"status": {"phase": "Running", "podIP": ip, "conditions": [
        {"type": "Ready", "status": "True"}]}});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

fn holds(req: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = req.values.as_deref().unwrap_or_default();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => !value.is_some_and(|v| values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        _ => false,
    }
}

/// Whether the DaemonSet's pods may run on `node` (its nodeSelector and required node
/// affinity, as the scheduler reads them).
fn places_on(ds: &DaemonSet, node: &Node) -> bool {
    let Some(pod) = ds.spec.as_ref().and_then(|s| s.template.spec.as_ref()) else {
        return false;
    };
    let labels = node.labels();
    let selected = pod
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let required = pod
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    let affine = required.is_none_or(|r| {
        r.node_selector_terms.iter().any(|t| {
            t.match_fields
                .iter()
                .flatten()
                .all(|f| f.key == "metadata.name" && holds(f, Some(node.name_any().as_str())))
                && t.match_expressions
                    .iter()
                    .flatten()
                    .all(|e| holds(e, labels.get(&e.key).map(String::as_str)))
        })
    });
    selected && affine
}

/// The member list graft-imex-daemon gets for `cd`: the record in graft's namespace.
async fn daemon_view(
    c: &kube::Client,
    daemons: &str,
    cd: &ComputeDomain,
) -> anyhow::Result<Vec<NodeStatus>> {
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), daemons);
    match api.get_opt(&daemon_name(&cd.uid().context("uid")?)).await? {
        Some(cm) => Ok(record::nodes(&cm)?),
        None => Ok(Vec::new()),
    }
}

/// Polls what `cd`'s daemons and its status say for `span`, adding each change to `seen`.
async fn observe(
    c: &kube::Client,
    daemons: &str,
    cd: &ComputeDomain,
    span: Duration,
    seen: &mut Vec<(Vec<NodeStatus>, Vec<NodeStatus>)>,
) -> anyhow::Result<()> {
    let start = Instant::now();
    while start.elapsed() < span {
        let st = status_of(c, &cd.namespace().unwrap_or_default(), &cd.name_any())
            .await?
            .map(|s| s.nodes)
            .unwrap_or_default();
        let now = (daemon_view(c, daemons, cd).await?, st);
        if seen.last() != Some(&now) {
            seen.push(now);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cannot_join_a_foreign_domain() -> anyhow::Result<()> {
    let c = client().await?;
    let daemons = namespaces(&c, "cd-join").await?;
    // The intruder publishes channels of the victim's clique (its own slices are its to
    // write), all held already, so that no other test's clique choice changes.
    held(
        &c,
        "cd-join",
        "intruder-channels",
        INTRUDER,
        None,
        &["imex-channel-0", "imex-channel-1"],
    )
    .await?;
    let nodes: Api<Node> = Api::all(c.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": INTRUDER}}))?;
    nodes.create(&PostParams::default(), &node).await?;
    Api::<ResourceSlice>::all(c.clone())
        .create(&PostParams::default(), &channel_slice(INTRUDER, "u.1", 2))
        .await?;

    let _ctl = controller(&c, "cd-join", "lease", "one");
    let cd = domain(&c, "cd-join", "victim", 2, "work").await?;
    let uid = cd.uid().context("uid")?;
    wait(|| async {
        Ok(status_of(&c, "cd-join", "victim")
            .await?
            .is_some_and(|s| s.slot.is_some()))
    })
    .await?;
    // The victim's workload: a claim allocated on each node of u.1, a ready daemon there.
    for (i, (n, ip)) in [("cd-a", "10.0.0.1"), ("cd-b", "10.0.0.2")]
        .into_iter()
        .enumerate()
    {
        held(&c, "cd-join", &format!("work-{i}"), n, Some(&cd), &[]).await?;
        daemon_at(&c, &daemons, &cd, n, ip).await?;
    }
    wait(|| async {
        Ok(status_of(&c, "cd-join", "victim")
            .await?
            .is_some_and(|s| s.status == Readiness::Ready && s.nodes.len() == 2))
    })
    .await?;

    let mut seen = Vec::new();
    let ds_api: Api<DaemonSet> = Api::namespaced(c.clone(), &daemons);
    let pods: Api<Pod> = Api::namespaced(c.clone(), &daemons);
    let key = node_label(&uid);
    for round in 0..3 {
        let on = json!({"metadata": {"labels": {key.as_str(): "true"}}});
        nodes
            .patch(INTRUDER, &PatchParams::default(), &Patch::Merge(&on))
            .await?;
        let ds = ds_api.get(&daemon_name(&uid)).await?;
        ensure!(
            !places_on(&ds, &nodes.get(INTRUDER).await?),
            "round {round}: the DaemonSet places a daemon on the self-labelled node"
        );
        // As the DaemonSet controller would have (or a static pod of the node's own).
        daemon_at(&c, &daemons, &cd, INTRUDER, "10.0.0.99").await?;
        observe(&c, &daemons, &cd, Duration::from_secs(3), &mut seen).await?;
        let off = json!({"metadata": {"labels": {key.as_str(): null}}});
        nodes
            .patch(INTRUDER, &PatchParams::default(), &Patch::Merge(&off))
            .await?;
        pods.delete(
            &format!("imex-{INTRUDER}"),
            &DeleteParams::default().grace_period(0),
        )
        .await?;
        observe(&c, &daemons, &cd, Duration::from_secs(2), &mut seen).await?;
    }
    for (view, status) in &seen {
        ensure!(
            !view.iter().chain(status).any(|n| n.name == INTRUDER),
            "the intruder is listed: daemons get {view:?}, status says {status:?}"
        );
    }
    // What the IMEX daemon on cd-a does with each list it is given: start once.
    let own = "10.0.0.1".parse()?;
    let mut running: Option<daemon::Running> = None;
    let mut starts = 0;
    for (view, _) in &seen {
        let members = daemon::members(view, "u.1");
        match daemon::plan(running.as_ref(), &members, own, 2) {
            Plan::Run(m) => {
                starts += 1;
                running = Some(m);
            }
            Plan::Remap(m) => {
                if let Some(r) = running.as_mut() {
                    r.members = m;
                }
            }
            Plan::Stop => running = None,
            Plan::Keep => {}
        }
    }
    ensure!(starts == 1, "nvidia-imex started {starts} times: {seen:?}");
    let st = status_of(&c, "cd-join", "victim")
        .await?
        .context("status")?;
    ensure!(st.status == Readiness::Ready, "{st:?}");
    Ok(())
}

/// A domain the squatting test's controller serves (its label), in any namespace.
async fn scoped_domain(
    c: &kube::Client,
    ns: &str,
    name: &str,
    num_nodes: u32,
) -> anyhow::Result<ComputeDomain> {
    let cd: ComputeDomain = serde_json::from_value(json!({
        "apiVersion": "resource.graft.dev/v1alpha1", "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": ns, "labels": {"test.graft.dev/scope": "squat"}},
        "spec": {"numNodes": num_nodes, "channel": {"resourceClaimTemplate": {"name": name}}},
    }))?;
    let api: Api<ComputeDomain> = Api::namespaced(c.clone(), ns);
    Ok(api.create(&PostParams::default(), &cd).await?)
}

async fn placed(c: &kube::Client, ns: &str, name: &str) -> anyhow::Result<bool> {
    Ok(status_of(c, ns, name)
        .await?
        .is_some_and(|s| s.slot.is_some()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_domains_do_not_squat_slots() -> anyhow::Result<()> {
    let c = client().await?;
    for ns in ["cd-squat-graft", "cd-squat-a", "cd-squat-b"] {
        namespace(&c, ns).await?;
    }
    // The default cap (two slots a namespace); a short grace, for the test's sake.
    let policy = SlotPolicy {
        idle_grace: Duration::from_secs(3),
        ..SlotPolicy::default()
    };
    let _ctl = controller_with(&c, "cd-squat", "lease", "one", move |ctx| {
        ctx.only_labelled("test.graft.dev/scope=squat")
            .with_slot_policy(policy)
    });
    // The squatter: as many empty domains as u.1 and u.2 have slots (two channels a node).
    for (name, n) in [("a1", 2), ("a2", 2)] {
        scoped_domain(&c, "cd-squat-a", name, n).await?;
        wait(|| placed(&c, "cd-squat-a", name)).await?;
    }
    for name in ["a3", "a4"] {
        scoped_domain(&c, "cd-squat-a", name, 1).await?;
        wait(|| async {
            let s = status_of(&c, "cd-squat-a", name).await?;
            Ok(s.is_some_and(|s| s.slot.is_some() || s.message.is_some()))
        })
        .await?;
        // Two slots held: the namespace's cap.
        let st = status_of(&c, "cd-squat-a", name).await?.context("status")?;
        let m = st.message.clone().unwrap_or_default();
        ensure!(
            st.slot.is_none() && m.contains("the most one namespace may hold"),
            "{name}: {st:?}"
        );
    }
    // Another namespace's one-node and two-node domains are placed all the same.
    scoped_domain(&c, "cd-squat-b", "v1", 1).await?;
    wait(|| placed(&c, "cd-squat-b", "v1")).await?;
    scoped_domain(&c, "cd-squat-b", "v2", 2).await?;
    wait(|| placed(&c, "cd-squat-b", "v2")).await?;
    // The squatter's domains say why they have no slot.
    let mut released = false;
    for name in ["a1", "a2"] {
        released |= has_event(&c, "cd-squat-a", name, "SlotReleased").await?;
    }
    ensure!(released, "no SlotReleased Event on a1 or a2");
    Ok(())
}
