//! graft-driver's side of a ComputeDomain, against a real kube-apiserver with the CRD, on a
//! fake NVIDIA node in a fabric clique: it publishes IMEX channels and as many imex-daemon
//! places, and labels its node with the clique; a workload channel's prepare labels its node for the domain and is refused
//! (the kubelet retries) until the domain's status lists the node Ready; a claim of another
//! namespace cannot join the domain; a domain made again under the same name is not the
//! claim's; a ComputeDomain configuration on the wrong device, or a daemon place without
//! a daemon's configuration, is refused by name. The tests
//! play the controller: they write the domain's status (its clique, slot and nodes)
//! themselves. [`binding`]: a channel is the domain's own, and a node runs one domain's
//! IMEX daemon.

use std::time::{Duration, Instant};

use anyhow::ensure;
use graft_compute_domain::crd::ComputeDomain;
use graft_integration::apiserver;
use graft_integration::claims::{allocated_claim, claim_msg, namespace, pod, uid};
use graft_integration::dra_node::{prepare, unprepare, DraNode};
use graft_integration::fake_gpu::FakeNode;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::CustomResourceExt;
use serde_json::json;

mod binding;

const NODE: &str = "cd-node";
const CLIQUE: (&str, u32) = ("0b6f7c1e5d1a4f7e9a432f1c1d7b2a10", 3);

fn channel_config(domain: &ComputeDomain, ns: &str) -> serde_json::Value {
    channel_config_mode(domain, ns, "Single")
}

fn channel_config_mode(domain: &ComputeDomain, ns: &str, mode: &str) -> serde_json::Value {
    json!([{"source": "FromClaim", "requests": ["channel"], "opaque": {"driver": "graft.dev",
        "parameters": {"apiVersion": "graft.dev/v1alpha1", "kind": "ComputeDomainChannelConfig",
            "domainID": domain.metadata.uid, "domainName": domain.metadata.name,
            "domainNamespace": ns, "allocationMode": mode}}}])
}

/// The domain `ns/name` of one node, as its user writes it.
fn domain(ns: &str, name: &str) -> anyhow::Result<ComputeDomain> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "resource.graft.dev/v1alpha1", "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": format!("{name}-channel")}}}
    }))?)
}

/// The domain `team-a/train` of one node, as its user writes it.
fn train() -> anyhow::Result<ComputeDomain> {
    domain("team-a", "train")
}

/// The domain's status as its controller writes it: placed in `clique` at `slot`, Ready on
/// `node`.
fn placed(clique: &str, slot: u32, node: &str) -> serde_json::Value {
    json!({"status": {"status": "Ready", "clique": clique, "slot": slot, "nodes": [
        {"name": node, "ipAddress": "10.0.0.1", "cliqueID": clique, "status": "Ready"}]}})
}

/// graft's namespace in these tests: graft-driver's client's default (the kubeconfig's).
const GRAFT_NS: &str = "default";

/// Plays the controller: merges `v` (`{"status": {...}}`) into the domain's status, which
/// people read, and the same placement and members into its record in graft's namespace,
/// which is what graft-driver decides from.
async fn controller_writes(
    domains: &Api<ComputeDomain>,
    c: &kube::Client,
    name: &str,
    v: serde_json::Value,
) -> anyhow::Result<()> {
    domains
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&v))
        .await?;
    let cd = domains.get(name).await?;
    let uid = cd.metadata.uid.clone().unwrap_or_default();
    let records: Api<ConfigMap> = Api::namespaced(c.clone(), GRAFT_NS);
    let rname = format!("imex-{uid}");
    let mut data = match records.get_opt(&rname).await? {
        Some(r) => r.data.unwrap_or_default(),
        None => Default::default(),
    };
    data.insert(
        "namespace".into(),
        cd.metadata.namespace.unwrap_or_default(),
    );
    data.insert("name".into(), name.into());
    let st = &v["status"];
    if let Some(clique) = st["clique"].as_str() {
        data.insert("clique".into(), clique.into());
    }
    if let Some(slot) = st["slot"].as_u64() {
        data.insert("slot".into(), slot.to_string());
    }
    if let Some(nodes) = st.get("nodes") {
        data.insert("nodes".into(), nodes.to_string());
    }
    let mut r = ConfigMap::default();
    r.metadata.name = Some(rname.clone());
    r.data = Some(data);
    match records.get_opt(&rname).await? {
        Some(old) => {
            r.metadata.resource_version = old.metadata.resource_version;
            records.replace(&rname, &PostParams::default(), &r).await?;
        }
        None => {
            records.create(&PostParams::default(), &r).await?;
        }
    }
    Ok(())
}

async fn wait_for(
    what: &str,
    mut f: impl AsyncFnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let start = Instant::now();
    while !f().await? {
        ensure!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: not within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// A fake NVIDIA node in the clique with `channels` IMEX channels and graft-driver on it
/// (ComputeDomains on), against the suite's API server with the CRD.
struct CdNode {
    dra: DraNode,
    c: kube::Client,
    _fake: FakeNode,
    _dir: tempfile::TempDir,
}

async fn cd_node(node: &str, channels: u32) -> anyhow::Result<CdNode> {
    let dir = tempfile::Builder::new().prefix("gcd").tempdir_in("/tmp")?;
    let fake = FakeNode::create(dir.path())?;
    fake.set_fabric(Some(CLIQUE))?;
    let hook = dir.path().join("bin/graft-hook");
    let hook_source = graft_integration::testbed::static_hook()?;
    let mut args: Vec<String> = vec!["--discovery".into(), "nvidia".into()];
    args.extend(fake.nvidia_args(&hook, &hook_source));
    args.extend(
        [
            "--nvidia-imex-channels",
            &channels.to_string(),
            "--nvidia-clique-label",
            "--nvidia-compute-domain-wait-seconds",
            "2",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cp = apiserver::named("compute_domain_node")?;
    let c = cp.client().await?;
    // The tests of this file share the API server: the first makes the CRD.
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    match crds
        .create(&PostParams::default(), &ComputeDomain::crd())
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        r => {
            r?;
        }
    }
    let dra = DraNode::start_with(cp, node, "", &args).await?;
    Ok(CdNode {
        dra,
        c,
        _fake: fake,
        _dir: dir,
    })
}

/// The node's clique, once graft-driver has labelled the node with it.
async fn node_clique(c: &kube::Client, node: &str) -> anyhow::Result<String> {
    let nodes: Api<Node> = Api::all(c.clone());
    let mut clique = String::new();
    wait_for("the node's clique label", async || {
        let labels = nodes.get(node).await?.metadata.labels.unwrap_or_default();
        clique = labels
            .get("resource.graft.dev/clique")
            .cloned()
            .unwrap_or_default();
        Ok(clique.ends_with(".3"))
    })
    .await?;
    Ok(clique)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_channel_waits_for_the_domain_on_its_node() -> anyhow::Result<()> {
    let n = cd_node(NODE, 2).await?;
    let (dra, c) = (&n.dra, n.c.clone());

    // Channels and daemon places, all of the node's clique.
    let slices: Api<k8s_openapi::api::resource::v1::ResourceSlice> = Api::all(c.clone());
    let lp = kube::api::ListParams::default().fields(&format!("spec.nodeName={NODE}"));
    let mut names = Vec::new();
    wait_for("the IMEX devices published", async || {
        names = slices
            .list(&lp)
            .await?
            .items
            .iter()
            .flat_map(|s| s.spec.devices.iter().flatten().map(|d| d.name.clone()))
            .filter(|n| n.starts_with("imex-"))
            .collect();
        names.sort();
        Ok(names.len() == 4)
    })
    .await?;
    ensure!(
        names
            == [
                "imex-channel-0",
                "imex-channel-1",
                "imex-daemon-0",
                "imex-daemon-1"
            ],
        "{names:?}"
    );

    // The node carries its clique as a label.
    let clique = node_clique(&c, NODE).await?;

    for ns in ["team-a", "team-b"] {
        namespace(&c, ns).await?;
    }
    let domains: Api<ComputeDomain> = Api::namespaced(c.clone(), "team-a");
    let cd = domains.create(&PostParams::default(), &train()?).await?;
    // Placed by its controller: the node's clique, slot 1.
    controller_writes(
        &domains,
        &c,
        "train",
        json!({"status": {"clique": clique, "slot": 1}}),
    )
    .await?;
    let p = pod(
        &c,
        "team-a",
        "w",
        &[("ch", "w-ch")],
        &[("main", &[("ch", "")])],
    )
    .await?;
    let claim = allocated_claim(
        &c,
        "team-a",
        "w-ch",
        NODE,
        &[("channel", "imex-channel-1")],
        channel_config(&cd, "team-a"),
        &[&p],
    )
    .await?;

    // Not Ready yet: refused (retried by the kubelet), and the node labelled for the domain.
    let e = prepare(dra, &[&claim]).await?[&uid(&claim)].error.clone();
    ensure!(
        e.contains("team-a/train") && e.contains("not ready on node cd-node"),
        "{e}"
    );
    ensure!(
        dra.record(&uid(&claim))?.is_none(),
        "a record before the domain was Ready"
    );
    let nodes: Api<Node> = Api::all(c.clone());
    let key = format!(
        "resource.graft.dev/computeDomain.{}",
        cd.metadata.uid.as_deref().unwrap_or_default()
    );
    let labels = nodes.get(NODE).await?.metadata.labels.unwrap_or_default();
    ensure!(
        labels.get(&key).map(String::as_str) == Some("true"),
        "{labels:?}"
    );

    // Ready on another node only: still refused.
    let status = |node: &str| {
        json!({"status": {"status": "NotReady", "nodes": [
            {"name": node, "ipAddress": "10.0.0.1", "cliqueID": "x.3", "status": "Ready"}]}})
    };
    controller_writes(&domains, &c, "train", status("elsewhere")).await?;
    let e = prepare(dra, &[&claim]).await?[&uid(&claim)].error.clone();
    ensure!(e.contains("no IMEX daemon of the domain here"), "{e}");

    // Ready here: the channel, exactly the allocated one.
    controller_writes(&domains, &c, "train", status(NODE)).await?;
    let r = prepare(dra, &[&claim]).await?;
    ensure!(r[&uid(&claim)].error.is_empty(), "{:?}", r[&uid(&claim)]);
    let rec = dra.record(&uid(&claim))?.expect("the channel's record");
    let paths: Vec<&str> = rec.devices[0]
        .edits
        .device_nodes
        .iter()
        .map(|n| n.path.as_str())
        .collect();
    ensure!(
        paths == ["/dev/nvidia-caps-imex-channels/channel1"],
        "{paths:?}"
    );

    // Another namespace naming the domain: refused, whatever the domain's status says.
    let q = pod(
        &c,
        "team-b",
        "x",
        &[("ch", "x-ch")],
        &[("main", &[("ch", "")])],
    )
    .await?;
    let foreign = allocated_claim(
        &c,
        "team-b",
        "x-ch",
        NODE,
        &[("channel", "imex-channel-0")],
        channel_config(&cd, "team-a"),
        &[&q],
    )
    .await?;
    let e = prepare(dra, &[&foreign]).await?[&uid(&foreign)]
        .error
        .clone();
    ensure!(
        e.contains("cannot join a domain of another namespace"),
        "{e}"
    );

    // The configuration on a daemon place: refused by name.
    let wrong = allocated_claim(
        &c,
        "team-a",
        "wrong",
        NODE,
        &[("channel", "imex-daemon-0")],
        channel_config(&cd, "team-a"),
        &[&p],
    )
    .await?;
    let e = prepare(dra, &[&wrong]).await?[&uid(&wrong)].error.clone();
    ensure!(e.contains("imex-channel devices only"), "{e}");

    // A daemon place without a domain's daemon configuration: refused.
    let squat = allocated_claim(
        &c,
        "team-b",
        "squat",
        NODE,
        &[("d", "imex-daemon-1")],
        json!([]),
        &[&q],
    )
    .await?;
    let e = prepare(dra, &[&squat]).await?[&uid(&squat)].error.clone();
    ensure!(e.contains("ComputeDomainDaemonConfig"), "{e}");

    // Unprepared: the record goes; the label stays for the controller to remove.
    let r = unprepare(dra, &[claim_msg(&claim)]).await?;
    ensure!(r.values().all(String::is_empty), "{r:?}");
    ensure!(dra.record(&uid(&claim))?.is_none());
    let labels = nodes.get(NODE).await?.metadata.labels.unwrap_or_default();
    ensure!(labels.contains_key(&key), "{labels:?}");

    // The domain deleted and made again under its name, Ready here: not the claim's domain.
    domains.delete("train", &Default::default()).await?;
    wait_for("the domain gone", async || {
        Ok(domains.get_opt("train").await?.is_none())
    })
    .await?;
    domains.create(&PostParams::default(), &train()?).await?;
    controller_writes(&domains, &c, "train", status(NODE)).await?;
    let e = prepare(dra, &[&claim]).await?[&uid(&claim)].error.clone();
    ensure!(e.contains("not the") && e.contains("made again"), "{e}");
    Ok(())
}
