//! graft-driver against a real kube-apiserver and etcd, driven over its sockets as the
//! kubelet drives it: registration, ResourceSlices the API server accepts and that come back
//! after the kubelet's wipe, prepare and unprepare with the per-container records graft-nri
//! reads, kill -9 at every prepare step, a reboot, and graft-nri's absence. Allocations are
//! written into claim status as the scheduler would.
//!
//! Needs the testbed (`integration/testbed/setup.sh`) and the workspace binaries
//! (`cargo build --workspace --bins`); the README's test command does both.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use graft_integration::apiserver::{self, ControlPlane};
use graft_integration::claims::{
    allocated_claim, claim_msg, claim_with_pod, namespace, pod, reserve_for, uid,
};
use graft_integration::dra_node::{prepare, unprepare, DraNode, DRIVER_NAME};
use graft_integration::scrape;
use graft_proto::dra::{v1, v1beta1};
use graft_proto::pluginregistration::{InfoRequest, RegistrationStatus};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use serde_json::json;

const DEVICES: &str = r#"
[[devices]]
path = "/dev/null"
attributes = { type = "test", index = 0 }

[[devices]]
path = "/dev/zero"
attributes = { type = "test", index = 1 }

[[devices]]
path = "/dev/full"
attributes = { type = "test", index = 2, fw = { version = "1.2.3" } }
"#;

const WAIT: Duration = Duration::from_secs(30);

fn cp() -> &'static ControlPlane {
    apiserver::shared().expect("control plane")
}

fn devices_of(r: &v1::NodePrepareResourceResponse) -> Vec<(String, Vec<String>)> {
    r.devices
        .iter()
        .map(|d| (d.device_name.clone(), d.request_names.clone()))
        .collect()
}

fn containers(rec: &graft_record::ClaimRecord, pod_uid: &str) -> Vec<(String, Vec<String>)> {
    rec.pods
        .iter()
        .find(|p| p.uid == pod_uid)
        .map(|p| {
            p.containers
                .iter()
                .map(|c| (c.name.clone(), c.devices.clone()))
                .collect()
        })
        .unwrap_or_default()
}

async fn slices(client: &kube::Client, node: &str) -> anyhow::Result<Vec<ResourceSlice>> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let lp =
        ListParams::default().fields(&format!("spec.driver={DRIVER_NAME},spec.nodeName={node}"));
    let mut items = api.list(&lp).await?.items;
    items.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(items)
}

/// Waits until the node's slices satisfy `ok`.
async fn wait_slices(
    client: &kube::Client,
    node: &str,
    what: &str,
    ok: impl Fn(&[ResourceSlice]) -> bool,
) -> anyhow::Result<Vec<ResourceSlice>> {
    let start = Instant::now();
    loop {
        let s = slices(client, node).await?;
        if ok(&s) {
            return Ok(s);
        }
        if start.elapsed() > WAIT {
            bail!(
                "slices of {node} never became {what}: {}",
                serde_json::to_string_pretty(&s)?
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn device_names(s: &[ResourceSlice]) -> Vec<String> {
    s.iter()
        .flat_map(|s| s.spec.devices.iter().flatten().map(|d| d.name.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_and_sockets() -> anyhow::Result<()> {
    let mut node = DraNode::start(cp(), "node-reg", DEVICES).await?;
    let socks = node.driver.registration_sockets();
    ensure!(
        socks.len() == 1 && socks[0].ends_with("graft.dev-reg.sock"),
        "{socks:?}"
    );
    let mut reg = node.driver.registration(&socks[0]).await?;
    let info = reg.get_info(InfoRequest {}).await?.into_inner();
    ensure!(
        info.r#type == "DRAPlugin" && info.name == DRIVER_NAME,
        "{info:?}"
    );
    ensure!(
        info.supported_versions
            == [
                "v1.DRAPlugin",
                "v1beta1.DRAPlugin",
                "v1.DRAResourceHealth",
                "v1alpha1.DRAResourceHealth"
            ],
        "{info:?}"
    );
    // Both health versions stream the same list, every device healthy and without a why.
    let [h1, h0] = node.driver.health_lists(&node.endpoint).await?;
    ensure!(h1 == h0 && h1.len() == 3, "{h1:?} {h0:?}");
    ensure!(
        h1.iter().all(|(_, h, why)| *h == 1 && why.is_empty()),
        "{h1:?}"
    );
    ensure!(
        info.endpoint
            == node
                .path("kubelet/plugins/graft.dev/dra.sock")
                .to_string_lossy(),
        "{info:?}"
    );

    // Not ready until the kubelet says it registered the plugin (alive all along).
    let health = node.driver.health_socket();
    let (code, why) = scrape::get(&health, "/readyz")?;
    ensure!(
        code == 503 && why.contains("not yet registered"),
        "{code} {why}"
    );
    ensure!(scrape::get(&health, "/healthz")?.0 == 200);

    // Registered, then rejected: the rejection is surfaced.
    reg.notify_registration_status(RegistrationStatus {
        plugin_registered: true,
        error: String::new(),
    })
    .await?;
    let ready = scrape::wait_ready(&health, Duration::from_secs(30))?;
    ensure!(ready.contains("ResourceSlices published"), "{ready}");
    let m = node.driver.metrics()?;
    ensure!(m.contains("graft_driver_build_info{version="), "{m}");
    let char_devices = "graft_driver_devices{class=\"graft.dev\",health=\"healthy\"}";
    ensure!(scrape::need(&m, char_devices)? >= 2.0, "{m}");
    ensure!(
        scrape::need(&m, "graft_driver_slices_published_total")? >= 1.0,
        "{m}"
    );
    let rejected = reg
        .notify_registration_status(RegistrationStatus {
            plugin_registered: false,
            error: "version mismatch".into(),
        })
        .await;
    ensure!(
        rejected.is_err(),
        "a rejection must be answered with an error"
    );
    node.driver.wait_log("rejected the registration", WAIT)?;
    let (code, why) = scrape::get(&health, "/readyz")?;
    ensure!(code == 503 && why.contains("rejected"), "{code} {why}");

    // Both service versions answer; an empty request gets an empty map.
    let empty = node
        .dra()
        .await?
        .node_prepare_resources(v1::NodePrepareResourcesRequest { claims: vec![] })
        .await?
        .into_inner();
    ensure!(empty.claims.is_empty());
    let beta = node
        .driver
        .dra_v1beta1(&node.endpoint)
        .await?
        .node_unprepare_resources(v1beta1::NodeUnprepareResourcesRequest {
            claims: vec![v1beta1::Claim {
                namespace: "x".into(),
                uid: "u-unknown".into(),
                name: "y".into(),
            }],
        })
        .await?
        .into_inner();
    ensure!(
        beta.claims
            .get("u-unknown")
            .is_some_and(|r| r.error.is_empty()),
        "{beta:?}"
    );

    // SIGTERM unlinks both sockets.
    let st = node.driver.terminate()?;
    ensure!(st.success(), "graft-driver exited with {st}");
    ensure!(node.driver.registration_sockets().is_empty());
    ensure!(!node.endpoint.exists(), "DRA socket left behind");

    // Rolling-update mode: per-instance names from the pod UID; a stale file is replaced.
    let pod_uid = "3f1c2b7a-0d4e-4a5b-8c6d-7e8f9a0b1c2d";
    node.driver.opts.pod_uid = Some(pod_uid.into());
    let stale = node.path(&format!(
        "kubelet/plugins_registry/graft.dev-{pod_uid}-reg.sock"
    ));
    std::fs::write(&stale, b"stale")?;
    node.restart_driver(None).await?;
    let socks = node.driver.registration_sockets();
    ensure!(socks == vec![stale.clone()], "{socks:?}");
    ensure!(
        node.endpoint.ends_with(format!("dra-{pod_uid}.sock")),
        "{:?}",
        node.endpoint
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slices_accepted_recreated_and_follow_hotplug() -> anyhow::Result<()> {
    // Hot-plugged devices appear in a directory of their own under /dev.
    let hp = tempfile::Builder::new()
        .prefix("graft-hp-")
        .tempdir_in("/dev")?;
    let config = format!(
        "{DEVICES}\n[[devices]]\npath = \"{}/tty*\"\nattributes = {{ type = \"serial\" }}\n",
        hp.path().display()
    );
    let node = DraNode::start(cp(), "node-slices", &config).await?;
    let client = &node.client;

    let first = wait_slices(client, "node-slices", "published", |s| s.len() == 1).await?;
    let s = &first[0];
    ensure!(s.spec.node_name.as_deref() == Some("node-slices"));
    ensure!(s.spec.pool.name == "node-slices" && s.spec.pool.resource_slice_count == 1);
    let owner = &s.metadata.owner_references.as_ref().context("no owner")?[0];
    ensure!(owner.kind == "Node" && owner.name == "node-slices" && owner.controller == Some(true));
    // In devices.toml's order: the order the scheduler's first fit walks is the backend's.
    ensure!(
        device_names(&first) == ["null", "zero", "full"],
        "{:?}",
        device_names(&first)
    );
    let full = s
        .spec
        .devices
        .iter()
        .flatten()
        .find(|d| d.name == "full")
        .context("no device full")?;
    let attrs = full.attributes.as_ref().context("no attributes")?;
    ensure!(attrs["type"].string.as_deref() == Some("test"));
    ensure!(attrs["fw"].version.as_deref() == Some("1.2.3"));
    ensure!(
        attrs["major"].int == Some(1) && attrs["minor"].int == Some(7),
        "{attrs:?}"
    );
    let gen1 = s.spec.pool.generation;

    // Stable: a resync does not bump the generation.
    tokio::time::sleep(Duration::from_millis(500)).await;
    ensure!(slices(client, "node-slices").await?[0].spec.pool.generation == gen1);

    // The kubelet's wipe: the slices come back, at a higher generation.
    let api: Api<ResourceSlice> = Api::all(client.clone());
    api.delete(
        s.metadata.name.as_deref().unwrap(),
        &DeleteParams::default(),
    )
    .await?;
    let back = wait_slices(client, "node-slices", "recreated", |s| {
        s.len() == 1 && s[0].spec.pool.generation > gen1
    })
    .await
    .with_context(|| node.driver.log_text())?;
    ensure!(device_names(&back) == ["null", "zero", "full"]);
    let gen2 = back[0].spec.pool.generation;

    // Hot-plug 130 serial devices: two slices, 128 devices at most each, count right.
    for i in 0..130 {
        // The node is /dev/null's (c 1:3).
        let p = hp.path().join(format!("tty{i:03}"));
        mknod(
            &p,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o600),
            makedev(1, 3),
        )
        .with_context(|| format!("mknod {}", p.display()))?;
    }
    let many = wait_slices(client, "node-slices", "two slices", |s| {
        s.len() == 2 && device_names(s).len() == 133
    })
    .await?;
    for s in &many {
        ensure!(s.spec.devices.as_ref().map_or(0, |d| d.len()) <= 128);
        ensure!(s.spec.pool.resource_slice_count == 2 && s.spec.pool.generation > gen2);
    }
    ensure!(many[0].spec.pool.generation == many[1].spec.pool.generation);

    // Unplugged: back to one slice, the other deleted.
    for e in std::fs::read_dir(hp.path())? {
        std::fs::remove_file(e?.path())?;
    }
    wait_slices(client, "node-slices", "one slice again", |s| {
        s.len() == 1 && device_names(s).len() == 3 && s[0].spec.pool.resource_slice_count == 1
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_maps_containers_and_is_idempotent() -> anyhow::Result<()> {
    let node = DraNode::start(cp(), "node-map", DEVICES).await?;
    let c = &node.client;
    namespace(c, "map").await?;
    let p1 = pod(
        c,
        "map",
        "p1",
        &[("gpus", "shared")],
        &[
            ("init:setup", &[("gpus", "a")]),
            ("both", &[("gpus", "")]),
            ("b-only", &[("gpus", "b")]),
            ("plain", &[]),
        ],
    )
    .await?;
    let config = json!([
        {"source": "FromClass", "opaque": {"driver": DRIVER_NAME, "parameters":
            {"apiVersion": "graft.dev/v1alpha1", "kind": "DeviceConfig", "env": {"FROM": "class"}}}},
        {"source": "FromClaim", "requests": ["a"], "opaque": {"driver": DRIVER_NAME, "parameters":
            {"apiVersion": "graft.dev/v1alpha1", "kind": "DeviceConfig", "env": {"FROM": "claim"}, "fileMode": 384}}},
        {"source": "FromClaim", "opaque": {"driver": "other.example.com", "parameters": {"kind": "Unknown"}}}
    ]);
    let claim = allocated_claim(
        c,
        "map",
        "shared",
        "node-map",
        &[("a", "null"), ("b", "zero")],
        config,
        &[&p1],
    )
    .await?;

    let r = prepare(&node, &[&claim]).await?;
    let got = &r[&uid(&claim)];
    ensure!(got.error.is_empty(), "{}", got.error);
    ensure!(
        devices_of(got)
            == [
                ("null".to_string(), vec!["a".to_string()]),
                ("zero".into(), vec!["b".into()])
            ],
        "{got:?}"
    );
    ensure!(got
        .devices
        .iter()
        .all(|d| d.pool_name == "node-map" && d.cdi_device_ids.is_empty()));
    // The metrics follow: the call timed, the claim and its record counted, graft-nri seen.
    let m = wait_metric(&node, "graft_driver_prepared_claims", 1.0).await?;
    let ok = "graft_driver_prepare_duration_seconds_count{result=\"ok\"}";
    ensure!(scrape::need(&m, ok)? >= 1.0, "{m}");
    ensure!(scrape::need(&m, "graft_driver_records")? == 1.0, "{m}");
    ensure!(
        scrape::need(&m, "graft_driver_nri_plugin_connected")? == 1.0,
        "{m}"
    );

    let rec = node.record(&uid(&claim))?.context("no record")?;
    let p1_uid = p1.metadata.uid.clone().unwrap_or_default();
    let want: Vec<(String, Vec<String>)> = vec![
        ("setup".into(), vec!["null".into()]),
        ("both".into(), vec!["null".into(), "zero".into()]),
        ("b-only".into(), vec!["zero".into()]),
    ];
    ensure!(containers(&rec, &p1_uid) == want, "{:?}", rec.pods);
    let null = rec
        .devices
        .iter()
        .find(|d| d.name == "null")
        .context("null")?;
    ensure!(
        null.edits.device_nodes[0].file_mode == Some(0o600),
        "{null:?}"
    );
    ensure!(
        null.edits
            .env
            .iter()
            .any(|e| e.name == "FROM" && e.value == "claim"),
        "{null:?}"
    );
    let zero = rec
        .devices
        .iter()
        .find(|d| d.name == "zero")
        .context("zero")?;
    ensure!(
        zero.edits
            .env
            .iter()
            .any(|e| e.name == "FROM" && e.value == "class"),
        "{zero:?}"
    );

    // Again: same devices. A second pod shares the claim and gains its mapping.
    let p2 = pod(
        c,
        "map",
        "p2",
        &[("dev", "shared")],
        &[("only", &[("dev", "b")])],
    )
    .await?;
    reserve_for(c, &claim, &[&p1, &p2]).await?;
    let again = prepare(&node, &[&claim]).await?;
    ensure!(devices_of(&again[&uid(&claim)]) == devices_of(got));
    let rec = node.record(&uid(&claim))?.context("no record")?;
    ensure!(rec.pods.len() == 2);
    let p2_uid = p2.metadata.uid.clone().unwrap_or_default();
    ensure!(containers(&rec, &p2_uid) == vec![("only".to_string(), vec!["zero".to_string()])]);

    // v1beta1 prepares the same way.
    let beta = node
        .driver
        .dra_v1beta1(&node.endpoint)
        .await?
        .node_prepare_resources(v1beta1::NodePrepareResourcesRequest {
            claims: vec![v1beta1::Claim {
                namespace: "map".into(),
                uid: uid(&claim),
                name: "shared".into(),
            }],
        })
        .await?
        .into_inner();
    ensure!(beta.claims[&uid(&claim)].devices.len() == 2);

    // Unprepare: the record goes; again, and for an unknown claim, is success.
    for _ in 0..2 {
        let u = unprepare(&node, &[claim_msg(&claim)]).await?;
        ensure!(u[&uid(&claim)].is_empty(), "{u:?}");
    }
    ensure!(node.record(&uid(&claim))?.is_none());
    ensure!(node.checkpoint()?["claims"]
        .as_object()
        .is_some_and(|m| m.is_empty()));
    let m = wait_metric(&node, "graft_driver_prepared_claims", 0.0).await?;
    let ok = "graft_driver_unprepare_duration_seconds_count{result=\"ok\"}";
    ensure!(scrape::need(&m, ok)? >= 2.0, "{m}");
    ensure!(scrape::need(&m, "graft_driver_records")? == 0.0, "{m}");
    Ok(())
}

/// The metrics once `series` reads `want` (the counts are refreshed after each call).
async fn wait_metric(node: &DraNode, series: &str, want: f64) -> anyhow::Result<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = node.driver.metrics()?;
        if scrape::value(&m, series) == Some(want) {
            return Ok(m);
        }
        if Instant::now() > deadline {
            bail!("{series} is not {want}:\n{m}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_refuses_what_it_must() -> anyhow::Result<()> {
    let node = DraNode::start(cp(), "node-err", DEVICES).await?;
    let c = &node.client;
    namespace(c, "err").await?;
    let p = pod(c, "err", "p", &[("d", "first")], &[("c", &[("d", "")])]).await?;
    let first = allocated_claim(
        c,
        "err",
        "first",
        "node-err",
        &[("r", "null")],
        json!([]),
        &[&p],
    )
    .await?;
    ensure!(prepare(&node, &[&first]).await?[&uid(&first)]
        .error
        .is_empty());

    // The same device for another claim: refused, naming the holder.
    let second = allocated_claim(
        c,
        "err",
        "second",
        "node-err",
        &[("r", "null")],
        json!([]),
        &[&p],
    )
    .await?;
    let e = &prepare(&node, &[&second]).await?[&uid(&second)].error;
    ensure!(
        e.contains("already prepared") && e.contains("err/first"),
        "{e}"
    );

    // Opaque config of an unknown kind: a per-claim error naming the field.
    let bad = allocated_claim(
        c, "err", "bad", "node-err", &[("r", "zero")],
        json!([{"source": "FromClaim", "opaque": {"driver": DRIVER_NAME, "parameters": {"apiVersion": "graft.dev/v1alpha1", "kind": "GpuConfig"}}}]),
        &[&p],
    )
    .await?;
    let e = &prepare(&node, &[&bad]).await?[&uid(&bad)].error;
    ensure!(
        e.contains("config[0].opaque.parameters") && e.contains("GpuConfig"),
        "{e}"
    );
    let typo = allocated_claim(
        c, "err", "typo", "node-err", &[("r", "zero")],
        json!([{"source": "FromClaim", "opaque": {"driver": DRIVER_NAME, "parameters": {"apiVersion": "graft.dev/v1alpha1", "kind": "DeviceConfig", "evn": {}}}}]),
        &[&p],
    )
    .await?;
    let e = &prepare(&node, &[&typo]).await?[&uid(&typo)].error;
    ensure!(e.contains("evn"), "{e}");

    // A device the node does not have.
    let ghost = allocated_claim(
        c,
        "err",
        "ghost",
        "node-err",
        &[("r", "nope")],
        json!([]),
        &[&p],
    )
    .await?;
    let e = &prepare(&node, &[&ghost]).await?[&uid(&ghost)].error;
    ensure!(e.contains("not present"), "{e}");

    // Two claims of one call wanting the same device: one gets it.
    let x = allocated_claim(
        c,
        "err",
        "x",
        "node-err",
        &[("r", "full")],
        json!([]),
        &[&p],
    )
    .await?;
    let y = allocated_claim(
        c,
        "err",
        "y",
        "node-err",
        &[("r", "full")],
        json!([]),
        &[&p],
    )
    .await?;
    let r = prepare(&node, &[&x, &y]).await?;
    ensure!(r[&uid(&x)].error.is_empty(), "{}", r[&uid(&x)].error);
    ensure!(
        r[&uid(&y)].error.contains("already prepared"),
        "{:?}",
        r[&uid(&y)]
    );

    // Whole-call failures: a missing claim, a replaced one, an unallocated one.
    let mut missing = claim_msg(&first);
    missing.name = "does-not-exist".into();
    let mut replaced = claim_msg(&first);
    replaced.uid = "00000000-0000-0000-0000-000000000000".into();
    let api: Api<ResourceClaim> = Api::namespaced(c.clone(), "err");
    let pending: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": "pending", "namespace": "err"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "graft.dev"}}]}}
    }))?;
    let pending = api.create(&PostParams::default(), &pending).await?;
    for (claim, needle) in [
        (missing, "not found"),
        (replaced, "replaced"),
        (claim_msg(&pending), "not allocated"),
    ] {
        let r = node
            .dra()
            .await?
            .node_prepare_resources(v1::NodePrepareResourcesRequest {
                claims: vec![claim_msg(&first), claim],
            })
            .await;
        let e = r.err().context("whole call must fail")?;
        ensure!(e.message().contains(needle), "{e:?}");
    }

    // Once the first claim is unprepared, the second gets the device.
    unprepare(&node, &[claim_msg(&first)]).await?;
    ensure!(prepare(&node, &[&second]).await?[&uid(&second)]
        .error
        .is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_at_each_prepare_step() -> anyhow::Result<()> {
    let mut node = DraNode::start(cp(), "node-crash", DEVICES).await?;
    let c = node.client.clone();
    namespace(&c, "crash").await?;
    for (i, point) in ["after-started", "after-record", "after-completed"]
        .iter()
        .enumerate()
    {
        let name = format!("c{i}");
        let (p, claim) = claim_with_pod(&c, "crash", &name, "node-crash", "null").await?;
        node.restart_driver(Some(point)).await?;
        let r = prepare(&node, &[&claim]).await;
        ensure!(r.is_err(), "{point}: the call should die with the driver");
        let st = node.driver.wait_exit(WAIT)?;
        ensure!(
            st.code().is_none(),
            "{point}: expected death by signal, got {st}"
        );

        node.restart_driver(None).await?;
        // The interrupted claim prepares to the same device, once.
        let r = prepare(&node, &[&claim]).await?;
        ensure!(
            r[&uid(&claim)].error.is_empty(),
            "{point}: {}",
            r[&uid(&claim)].error
        );
        ensure!(devices_of(&r[&uid(&claim)]) == [("null".to_string(), vec!["r".to_string()])]);
        let rec = node.record(&uid(&claim))?.context("record lost")?;
        ensure!(rec.pods.len() == 1 && rec.devices.len() == 1);
        let cp = node.checkpoint()?;
        ensure!(
            cp["claims"][uid(&claim)]["state"] == "PrepareCompleted",
            "{point}: {cp}"
        );

        // Not double-assigned: another claim for the same device is refused.
        let other = allocated_claim(
            &c,
            "crash",
            &format!("o{i}"),
            "node-crash",
            &[("r", "null")],
            json!([]),
            &[&p],
        )
        .await?;
        let e = &prepare(&node, &[&other]).await?[&uid(&other)].error;
        ensure!(e.contains("already prepared"), "{point}: {e}");

        // And not leaked: unprepare leaves nothing behind.
        let u = unprepare(&node, &[claim_msg(&claim)]).await?;
        ensure!(u[&uid(&claim)].is_empty());
        ensure!(node.record(&uid(&claim))?.is_none());
        ensure!(
            node.checkpoint()?["claims"]
                .as_object()
                .is_some_and(|m| m.is_empty()),
            "{point}"
        );
    }

    // Interrupted after the record, and the claim deleted while the driver was down: the
    // restart cleans the half-done prepare up.
    let (_, gone) = claim_with_pod(&c, "crash", "gone", "node-crash", "zero").await?;
    node.restart_driver(Some("after-record")).await?;
    ensure!(prepare(&node, &[&gone]).await.is_err());
    node.driver.wait_exit(WAIT)?;
    ensure!(node.record(&uid(&gone))?.is_some());
    Api::<ResourceClaim>::namespaced(c.clone(), "crash")
        .delete("gone", &DeleteParams::default())
        .await?;
    node.restart_driver(None).await?;
    let start = Instant::now();
    while node.record(&uid(&gone))?.is_some()
        || node.checkpoint()?["claims"].get(uid(&gone)).is_some()
    {
        ensure!(
            start.elapsed() < WAIT,
            "stale prepare not cleaned up: {}",
            node.checkpoint()?
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reboot_discards_the_checkpoint() -> anyhow::Result<()> {
    let mut node = DraNode::start(cp(), "node-boot", DEVICES).await?;
    let c = node.client.clone();
    namespace(&c, "boot").await?;
    let (_, before) = claim_with_pod(&c, "boot", "before", "node-boot", "null").await?;
    ensure!(prepare(&node, &[&before]).await?[&uid(&before)]
        .error
        .is_empty());

    // A damaged checkpoint (same boot) is moved aside and rebuilt from the records.
    node.driver.terminate()?;
    for slot in node.checkpoint_slots() {
        std::fs::write(slot, b"{\"version\": 1, \"cla")?;
    }
    node.restart_driver(None).await?;
    node.driver
        .wait_log("rebuilding it from the claim records", WAIT)?;
    let cp = node.checkpoint()?;
    ensure!(
        cp["claims"][uid(&before)]["state"] == "PrepareCompleted",
        "{cp}"
    );
    ensure!(node.record(&uid(&before))?.is_some());

    // A reboot: everything stops, the boot id changes, everything starts again.
    node.driver.terminate()?;
    node.nri.stop()?;
    std::fs::write(&node.boot_id_path, "11111111-2222-3333-4444-555555555555\n")?;
    node.nri.spawn()?;
    node.nri.wait_synchronized(WAIT)?;
    node.restart_driver(None).await?;
    node.driver.wait_log("another boot", WAIT)?;
    ensure!(
        node.record(&uid(&before))?.is_none(),
        "a record of the previous boot survived"
    );
    let cp = node.checkpoint()?;
    ensure!(
        cp["bootId"] == "11111111-2222-3333-4444-555555555555",
        "{cp}"
    );
    ensure!(
        cp["claims"].as_object().is_some_and(|m| m.is_empty()),
        "{cp}"
    );

    // The kubelet prepares again after the reboot; the device is free for it.
    let r = prepare(&node, &[&before]).await?;
    ensure!(
        r[&uid(&before)].error.is_empty(),
        "{}",
        r[&uid(&before)].error
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepare_fails_retriably_without_graft_nri() -> anyhow::Result<()> {
    let mut node = DraNode::start_with(
        cp(),
        "node-nri",
        DEVICES,
        &["--nri-event-grace-seconds", "1"],
    )
    .await?;
    let c = node.client.clone();
    namespace(&c, "nri").await?;
    let (_, claim) = claim_with_pod(&c, "nri", "c", "node-nri", "null").await?;
    let nri_tainted = |slices: &[ResourceSlice]| {
        let devices: Vec<_> = slices
            .iter()
            .flat_map(|s| s.spec.devices.iter().flatten())
            .collect();
        !devices.is_empty()
            && devices.iter().all(|d| {
                d.taints
                    .iter()
                    .flatten()
                    .any(|t| t.key == "graft.dev/nri-unavailable" && t.effect == "NoSchedule")
            })
    };

    node.nri.stop()?;
    let r = prepare(&node, &[&claim]).await?;
    let e = &r[&uid(&claim)].error;
    ensure!(e.contains("graft-nri"), "{e}");
    ensure!(
        node.record(&uid(&claim))?.is_none(),
        "nothing may be recorded while graft-nri is away"
    );
    // Away past its grace: every device is tainted, so no new pod is sent here.
    wait_slices(&c, "node-nri", "the NRI taint on every device", nri_tainted).await?;

    node.nri.spawn()?;
    node.nri.wait_synchronized(WAIT)?;
    wait_slices(&c, "node-nri", "the NRI taint gone", |s| {
        !s.is_empty() && !s.iter().any(|s| nri_tainted(std::slice::from_ref(s)))
    })
    .await?;
    let r = prepare(&node, &[&claim]).await?;
    ensure!(
        r[&uid(&claim)].error.is_empty(),
        "{}",
        r[&uid(&claim)].error
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_manifests_pass_server_side_dry_run() -> anyhow::Result<()> {
    let cp = cp();
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    // Namespaced objects need their namespace to exist; the service account of the
    // example pod is normally made by the controller-manager.
    cp.kubectl(&["create", "namespace", "graft-system"])?;
    cp.kubectl(&["create", "serviceaccount", "default", "-n", "default"])
        .ok();
    // Each unit as users apply it: the kustomizations, then the plain manifests.
    let mut out = String::new();
    for (how, dir) in [
        ("-k", "graft"),
        ("-k", "gpu"),
        ("-f", "optional"),
        ("-f", "examples"),
    ] {
        let path = deploy.join(dir).to_string_lossy().into_owned();
        out.push_str(&cp.kubectl(&["apply", "--dry-run=server", how, &path])?);
    }
    for kind in [
        "daemonset.apps/graft",
        "clusterrole",
        "validatingadmissionpolicy",
        "deviceclass",
        "resourceclaimtemplate",
        "pod/fuse-demo",
        "configmap/graft-devices",
    ] {
        ensure!(out.contains(kind), "{kind} missing from:\n{out}");
    }
    ensure!(out.lines().all(|l| l.contains("(server dry run)")), "{out}");
    // The GPU nodes' DaemonSet is accepted too (the test API server allows privileged pods,
    // as any cluster that runs GPU drivers' DaemonSets must), beside the other nodes' one.
    ensure!(
        out.matches("daemonset.apps/graft created").count() == 2,
        "{out}"
    );
    ensure!(
        out.matches("daemonset.apps/graft-gpu created").count() == 1,
        "{out}"
    );
    Ok(())
}
