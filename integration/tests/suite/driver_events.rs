//! graft-driver's Events and logs against a real kube-apiserver: a failed prepare posts
//! `PrepareFailed` on its claim, graft-nri's absence posts `NRIPluginNotConnected` on the
//! Node once (and `NRIPluginConnected` when it is back), a refusal graft-nri journals
//! becomes `DeviceInjectionRefused` on its pod, and `--log-format json` gives lines that
//! parse and carry the claim. graft-driver's own trouble on its Node ([`node`]):
//! devices.toml refused (`DeviceConfigInvalid`, after an edit and at start-up), the
//! checkpoint rebuilt (`CheckpointRebuilt`), graft-hook not installed (`HookInstallFailed`).
//!
//! Needs the testbed (`integration/testbed/setup.sh`) and the workspace binaries
//! (`cargo build --workspace --bins`).

use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use graft_integration::apiserver::{self, ControlPlane};
use graft_integration::claims::{allocated_claim, claim_with_pod, namespace, pod, uid};
use graft_integration::dra_node::{prepare, DraNode, DRIVER_NAME};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::json;

const DEVICES: &str = r#"
[[devices]]
path = "/dev/null"
attributes = { type = "test", index = 0 }
"#;

const WAIT: Duration = Duration::from_secs(30);

fn cp() -> &'static ControlPlane {
    apiserver::shared().expect("control plane")
}

/// Events in `ns` (all namespaces when empty) about object `name` with `reason`.
async fn events(
    c: &kube::Client,
    ns: &str,
    name: &str,
    reason: &str,
) -> anyhow::Result<Vec<Event>> {
    let api: Api<Event> = if ns.is_empty() {
        Api::all(c.clone())
    } else {
        Api::namespaced(c.clone(), ns)
    };
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect())
}

/// Waits until at least one such Event exists and returns them.
async fn wait_events(
    c: &kube::Client,
    ns: &str,
    name: &str,
    reason: &str,
) -> anyhow::Result<Vec<Event>> {
    let until = Instant::now() + WAIT;
    loop {
        let found = events(c, ns, name, reason).await?;
        if !found.is_empty() {
            return Ok(found);
        }
        if Instant::now() > until {
            bail!("no {reason} Event on {ns}/{name} within {WAIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_prepare_posts_prepare_failed_on_the_claim() -> anyhow::Result<()> {
    let node = DraNode::start(cp(), "node-evt-claim", DEVICES).await?;
    let c = &node.client;
    namespace(c, "evt-claim").await?;
    let p = pod(c, "evt-claim", "p", &[("d", "bad")], &[("c", &[("d", "")])]).await?;
    let bad = allocated_claim(
        c, "evt-claim", "bad", "node-evt-claim", &[("r", "null")],
        json!([{"source": "FromClaim", "opaque": {"driver": DRIVER_NAME, "parameters": {"apiVersion": "graft.dev/v1alpha1", "kind": "GpuConfig"}}}]),
        &[&p],
    )
    .await?;
    let e = prepare(&node, &[&bad]).await?[&uid(&bad)].error.clone();
    ensure!(!e.is_empty(), "the prepare must fail");
    let found = wait_events(c, "evt-claim", "bad", "PrepareFailed").await?;
    let ev = &found[0];
    ensure!(ev.type_.as_deref() == Some("Warning"), "{ev:?}");
    let r = ev.regarding.as_ref().unwrap();
    ensure!(r.kind.as_deref() == Some("ResourceClaim"), "{r:?}");
    ensure!(r.uid.as_deref() == Some(uid(&bad).as_str()), "{r:?}");
    let note = ev.note.as_deref().unwrap_or_default();
    ensure!(
        note.contains(&e) && note.contains("node-evt-claim"),
        "{note}"
    );
    ensure!(
        ev.reporting_controller.as_deref() == Some("graft.dev/graft-driver"),
        "{ev:?}"
    );

    // A prepare that succeeds posts nothing.
    let (_, good) = claim_with_pod(c, "evt-claim", "good", "node-evt-claim", "null").await?;
    ensure!(prepare(&node, &[&good]).await?[&uid(&good)]
        .error
        .is_empty());
    tokio::time::sleep(Duration::from_secs(1)).await;
    ensure!(events(c, "evt-claim", "good", "PrepareFailed")
        .await?
        .is_empty());
    // Counted by reason (a configuration the device cannot take), none left in flight.
    let m = node.driver.metrics()?;
    let value = |series: &str| graft_integration::scrape::value(&m, series);
    ensure!(
        value("graft_driver_prepare_errors_total{reason=\"bad_config\"}") == Some(1.0)
            && value("graft_driver_prepare_errors_total{reason=\"internal\"}") == Some(0.0)
            && value("graft_driver_prepare_in_flight") == Some(0.0),
        "{m}"
    );
    Ok(())
}

/// The first JSON line of `log` whose message is `message`.
fn json_line(log: &str, message: &str) -> Option<serde_json::Value> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["message"] == message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_carry_the_claim() -> anyhow::Result<()> {
    let mut node =
        DraNode::start_with(cp(), "node-evt-json", DEVICES, &["--log-format", "json"]).await?;
    let c = node.client.clone();
    namespace(&c, "evt-json").await?;
    let (_, claim) = claim_with_pod(&c, "evt-json", "c", "node-evt-json", "null").await?;
    ensure!(prepare(&node, &[&claim]).await?[&uid(&claim)]
        .error
        .is_empty());
    let log = node.driver.wait_log("prepared", WAIT)?;
    for l in log.lines().filter(|l| !l.trim().is_empty()) {
        serde_json::from_str::<serde_json::Value>(l)
            .map_err(|e| anyhow::anyhow!("not JSON ({e}): {l}"))?;
    }
    let line = json_line(&log, "prepared").ok_or_else(|| anyhow::anyhow!("{log}"))?;
    ensure!(line["span"]["claim"] == "evt-json/c", "{line}");
    ensure!(line["span"]["claim_uid"] == uid(&claim).as_str(), "{line}");
    ensure!(line["level"] == "INFO", "{line}");

    // graft-nri, with its --log-file: JSON lines too.
    node.nri.stop()?;
    let log = node.path("logs/graft-nri-json.log");
    let boot = node.boot_id_path.to_string_lossy().into_owned();
    let mut nri = graft_integration::nri::GraftNri::start(
        &node.containerd.nri_socket,
        &node.state_dir,
        &log,
        &["--boot-id-path", &boot, "--log-format", "json"],
    )?;
    nri.wait_synchronized(WAIT)?;
    let text = std::fs::read_to_string(&log)?;
    ensure!(json_line(&text, "graft-nri starting").is_some(), "{text}");
    nri.stop()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nri_outage_posts_one_node_event_and_its_end() -> anyhow::Result<()> {
    let mut node = DraNode::start_with(
        cp(),
        "node-evt-nri",
        DEVICES,
        &["--nri-event-grace-seconds", "1"],
    )
    .await?;
    let c = node.client.clone();
    ensure!(events(&c, "", "node-evt-nri", "NRIPluginNotConnected")
        .await?
        .is_empty());
    node.nri.stop()?;
    let found = wait_events(&c, "", "node-evt-nri", "NRIPluginNotConnected").await?;
    let ev = &found[0];
    ensure!(ev.type_.as_deref() == Some("Warning"), "{ev:?}");
    let r = ev.regarding.as_ref().unwrap();
    ensure!(r.kind.as_deref() == Some("Node"), "{r:?}");
    let note = ev.note.as_deref().unwrap_or_default();
    ensure!(
        note.contains("graft-nri") && note.contains("since"),
        "{note}"
    );
    // Once per outage: several checks later, still one Event, never repeated as a series.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let found = events(&c, "", "node-evt-nri", "NRIPluginNotConnected").await?;
    ensure!(found.len() == 1 && found[0].series.is_none(), "{found:?}");

    node.nri.spawn()?;
    node.nri.wait_synchronized(WAIT)?;
    let back = wait_events(&c, "", "node-evt-nri", "NRIPluginConnected").await?;
    ensure!(back[0].type_.as_deref() == Some("Normal"), "{back:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journaled_refusal_becomes_a_pod_event() -> anyhow::Result<()> {
    use graft_record::refusals::{self, PodRef, Refusal};
    let node = DraNode::start(cp(), "node-evt-ref", DEVICES).await?;
    let c = node.client.clone();
    namespace(&c, "evt-ref").await?;
    let (p, _) = claim_with_pod(&c, "evt-ref", "gpu", "node-evt-ref", "null").await?;
    // A hostile neighbour first: garbage, an oversized entry, a planted symlink.
    let dir = refusals::journal_dir(&node.state_dir);
    std::fs::write(dir.join("0000000000001-1.json"), b"{garbage")?;
    std::fs::write(dir.join("0000000000002-1.json"), vec![b'x'; 10_000])?;
    std::os::unix::fs::symlink("/etc/hostname", dir.join("0000000000003-1.json"))?;
    let r = Refusal::new(
        PodRef {
            namespace: "evt-ref".into(),
            name: p.metadata.name.clone().unwrap_or_default(),
            uid: p.metadata.uid.clone().unwrap_or_default(),
        },
        "c",
        "0123abcd",
        &["evt-ref/gpu".into()],
        "device null is no longer on this node",
    );
    refusals::append(&node.state_dir, &r)?;
    let found = wait_events(&c, "evt-ref", "gpu-pod", "DeviceInjectionRefused").await?;
    let ev = &found[0];
    ensure!(ev.type_.as_deref() == Some("Warning"), "{ev:?}");
    let reg = ev.regarding.as_ref().unwrap();
    ensure!(
        reg.kind.as_deref() == Some("Pod") && reg.uid == p.metadata.uid,
        "{reg:?}"
    );
    let note = ev.note.as_deref().unwrap_or_default();
    ensure!(
        note.contains("evt-ref/gpu") && note.contains("no longer on this node"),
        "{note}"
    );
    // Every entry is gone, the driver still runs and says why it skipped the bad ones.
    let until = Instant::now() + WAIT;
    while std::fs::read_dir(&dir)?.count() > 0 {
        ensure!(Instant::now() < until, "journal not emptied");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = node.driver.wait_log("entry skipped", WAIT)?;
    ensure!(
        log.contains("entry skipped") && log.contains("symlink"),
        "{log}"
    );
    ensure!(std::fs::read_to_string("/etc/hostname").is_ok());
    ensure!(node.driver.pid().is_some());
    Ok(())
}

mod node;
