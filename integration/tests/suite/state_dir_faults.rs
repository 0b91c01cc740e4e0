//! graft-driver when its state directory fails under it (a tiny tmpfs that fills up, a
//! read-only remount), and opaque claim configuration that asks for what graft refuses, both
//! through a real API server and the driver's kubelet socket. A failed prepare must name the
//! cause, leave no half-written record, and lose nothing written before.
//!
//! Needs root (mounts), the testbed and the workspace binaries; the README's test command
//! provides them.

use std::path::Path;

use anyhow::ensure;
use graft_integration::apiserver::{self, ControlPlane};
use graft_integration::claims::{allocated_claim, namespace, pod, uid};
use graft_integration::dra_node::{prepare, unprepare, DraNode, DRIVER_NAME};
use graft_integration::mounts::remount;
use serde_json::json;

const DEVICES: &str = r#"
[[devices]]
path = "/dev/null"
attributes = { type = "test" }
env = { TEST_DEVICE = "/dev/null" }

[[devices]]
path = "/dev/zero"
attributes = { type = "test" }

[[devices]]
path = "/dev/full"
attributes = { type = "test" }
"#;

fn cp() -> &'static ControlPlane {
    apiserver::shared().expect("API server")
}

/// Hidden temp files a failed write might leave behind.
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(".tmp"))
                .collect()
        })
        .unwrap_or_default()
}

/// The error preparing `claim` gives: its own, or the whole call's (a local failure such
/// as an unwritable checkpoint fails the call, which the kubelet retries).
async fn prepare_error(
    node: &DraNode,
    claim: &k8s_openapi::api::resource::v1::ResourceClaim,
) -> String {
    match prepare(node, &[claim]).await {
        Ok(r) => r
            .get(&uid(claim))
            .map(|r| r.error.clone())
            .unwrap_or_default(),
        Err(e) => format!("{e:#}"),
    }
}

/// Writes into `dir` until the filesystem is full.
fn fill(dir: &Path) -> anyhow::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("filler"))?;
    let chunk = vec![0u8; 64 * 1024];
    loop {
        if let Err(e) = f.write_all(&chunk).and_then(|()| f.sync_all()) {
            ensure!(
                e.raw_os_error() == Some(nix::errno::Errno::ENOSPC as i32),
                "filling: {e}"
            );
            // Tail pages too: small writes until nothing fits.
            while f.write_all(&[0u8; 512]).is_ok() {}
            return Ok(());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_or_read_only_state_directory_fails_prepares_and_loses_nothing() -> anyhow::Result<()>
{
    let node = DraNode::start_on_tmpfs(cp(), "node-full", DEVICES, "1m").await?;
    let c = &node.client;
    namespace(c, "full").await?;
    let p = pod(
        c,
        "full",
        "p",
        &[("a", "a"), ("b", "b"), ("c", "c")],
        &[("c", &[("a", ""), ("b", ""), ("c", "")])],
    )
    .await?;
    let claim = |name: &'static str, device: &'static str| {
        let p = p.clone();
        async move {
            allocated_claim(
                c,
                "full",
                name,
                "node-full",
                &[("r", device)],
                json!([]),
                &[&p],
            )
            .await
        }
    };
    let a = claim("a", "null").await?;
    let b = claim("b", "zero").await?;
    let cc = claim("c", "full").await?;
    ensure!(prepare(&node, &[&a]).await?[&uid(&a)].error.is_empty());
    let claims_dir = node.state_dir.join("claims");
    let record_a = std::fs::read(claims_dir.join(format!("{}.json", uid(&a))))?;

    // Full: the next prepare fails, naming the cause; nothing half-written, nothing lost.
    fill(&node.state_dir)?;
    let e = prepare_error(&node, &b).await;
    ensure!(e.contains("No space left on device"), "{e}");
    ensure!(
        node.record(&uid(&b))?.is_none(),
        "a record of the failed prepare"
    );
    ensure!(
        leftovers(&claims_dir).is_empty(),
        "{:?}",
        leftovers(&claims_dir)
    );
    ensure!(std::fs::read(claims_dir.join(format!("{}.json", uid(&a))))? == record_a);
    ensure!(node.record(&uid(&a))?.is_some());
    // The kubelet retries; once there is room it succeeds.
    std::fs::remove_file(node.state_dir.join("filler"))?;
    ensure!(prepare(&node, &[&b]).await?[&uid(&b)].error.is_empty());

    // Read-only: prepare and unprepare fail, naming the cause; records stay.
    remount(&node.state_dir, true)?;
    let e = prepare_error(&node, &cc).await;
    let u = unprepare(&node, &[graft_integration::claims::claim_msg(&b)]).await?;
    remount(&node.state_dir, false)?;
    ensure!(e.contains("Read-only file system"), "prepare: {e}");
    ensure!(
        u[&uid(&b)].contains("Read-only file system"),
        "unprepare: {u:?}"
    );
    ensure!(node.record(&uid(&b))?.is_some(), "record b lost");
    ensure!(node.record(&uid(&cc))?.is_none());
    ensure!(std::fs::read(claims_dir.join(format!("{}.json", uid(&a))))? == record_a);
    // Writable again: both go through.
    ensure!(prepare(&node, &[&cc]).await?[&uid(&cc)].error.is_empty());
    let u = unprepare(&node, &[graft_integration::claims::claim_msg(&b)]).await?;
    ensure!(u[&uid(&b)].is_empty(), "{u:?}");
    ensure!(node.record(&uid(&b))?.is_none());
    Ok(())
}

/// Opaque configuration is merged class first, claim on top, key by key; loader variables,
/// PATH, the variables graft owns and the device's own variables are refused at prepare,
/// where the kubelet puts the error on the pod's events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opaque_configuration_cannot_set_what_graft_refuses() -> anyhow::Result<()> {
    let node = DraNode::start(cp(), "node-opaque", DEVICES).await?;
    let c = &node.client;
    namespace(c, "opaque").await?;
    let p = pod(c, "opaque", "p", &[("d", "x")], &[("c", &[("d", "")])]).await?;
    let params = |env: serde_json::Value| json!({"apiVersion": "graft.dev/v1alpha1", "kind": "DeviceConfig", "env": env});
    let refused = [
        ("preload", "LD_PRELOAD", "owned|loader", "null"),
        ("libpath", "LD_LIBRARY_PATH", "loader", "zero"),
        ("path", "PATH", "loader", "zero"),
        (
            "visible",
            "NVIDIA_VISIBLE_DEVICES",
            "owned by graft",
            "zero",
        ),
        (
            "device-own",
            "TEST_DEVICE",
            "which the device itself sets",
            "null",
        ),
    ];
    for (name, var, why, device) in refused {
        let claim = allocated_claim(
            c,
            "opaque",
            name,
            "node-opaque",
            &[("r", device)],
            json!([{"source": "FromClaim", "opaque": {"driver": DRIVER_NAME,
                    "parameters": params(json!({"OK": "1", var: "x"}))}}]),
            &[&p],
        )
        .await?;
        let e = prepare(&node, &[&claim]).await?[&uid(&claim)].error.clone();
        ensure!(
            e.contains(var) && why.split('|').any(|w| e.contains(w)),
            "{name}: {e}"
        );
        ensure!(
            node.record(&uid(&claim))?.is_none(),
            "{name}: a record was written"
        );
    }

    // Class then claim, key by key.
    let merged = allocated_claim(
        c,
        "opaque",
        "merged",
        "node-opaque",
        &[("r", "full")],
        json!([
            {"source": "FromClaim", "opaque": {"driver": DRIVER_NAME,
             "parameters": params(json!({"B": "claim"}))}},
            {"source": "FromClass", "opaque": {"driver": DRIVER_NAME,
             "parameters": params(json!({"A": "class", "B": "class"}))}}
        ]),
        &[&p],
    )
    .await?;
    let e = &prepare(&node, &[&merged]).await?[&uid(&merged)].error;
    ensure!(e.is_empty(), "{e}");
    let rec = node
        .record(&uid(&merged))?
        .ok_or_else(|| anyhow::anyhow!("no record"))?;
    // The claim's one device has all of it: stored once, as the claim's own (version 2).
    let env: Vec<(String, String)> = rec
        .env
        .iter()
        .map(|v| (v.name.clone(), v.value.clone()))
        .collect();
    ensure!(
        env == [("A".into(), "class".into()), ("B".into(), "claim".into())],
        "{env:?}"
    );
    Ok(())
}
