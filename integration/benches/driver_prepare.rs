//! graft-driver figures against the real API server: time from start to published
//! ResourceSlices, NodePrepareResources latency for one claim and for batches of 100 (split
//! into the API reads and the local work, as the driver logs them), and RSS idle and with
//! 1100 prepared claims. Then the batches again, each unprepared and prepared once by
//! graft-driver without and once with `--pod-cache`, alternating, for the API reads side by
//! side.
//!
//! Run: `cargo build --release --workspace --bins && cargo bench -p graft-integration --bench driver_prepare`

use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use futures::future::try_join_all;
use graft_integration::apiserver;
use graft_integration::bench::mem::Footprint;
use graft_integration::claims::{allocated_claim, claim_msg, namespace, pod_on};
use graft_integration::dra_node::{unprepare, DraNode, DRIVER_NAME};
use graft_proto::dra::v1;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams};
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use serde_json::json;

const DEVICES: usize = 1100;
const SINGLE: usize = 200;
const BATCH: usize = 100;
const NODE: &str = "bench-node";

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

/// `pid`'s memory: resident, anonymous, dirty, clean private file pages (KiB).
fn rss_kib(pid: u32) -> Footprint {
    Footprint::of(pid)
}

/// (fetch_us, local_us) of every NodePrepareResources call the driver logged, in order.
fn logged_timings(log: &str) -> Vec<(f64, f64)> {
    let field = |l: &str, k: &str| -> Option<f64> {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
    };
    log.lines()
        .filter(|l| l.contains("NodePrepareResources"))
        .filter_map(|l| Some((field(l, "fetch_us=")?, field(l, "local_us=")?)))
        .collect()
}

/// The driver's logged timings once there are at least `n` (or after 5 s, with what there
/// is): its log lines are written by a thread of their own, so a call's line may land just
/// after its answer.
async fn timings_at_least(node: &DraNode, n: usize) -> Vec<(f64, f64)> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let t = logged_timings(&node.driver.log_text());
        if t.len() >= n || Instant::now() > deadline {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn make_claims(
    client: &kube::Client,
    range: std::ops::Range<usize>,
) -> anyhow::Result<Vec<ResourceClaim>> {
    let mut out = Vec::new();
    let idx: Vec<usize> = range.collect();
    for chunk in idx.chunks(16) {
        let made = try_join_all(chunk.iter().map(|&i| async move {
            let name = format!("c{i:04}");
            // Bound to the node, as every pod a claim on it is reserved for.
            let p = pod_on(
                client,
                "bench",
                &format!("p{i:04}"),
                Some(NODE),
                &[("d", &name)],
                &[("c", &[("d", "")])],
            )
            .await?;
            // The char backend names a device after its path below /dev.
            let dev = format!("graft-bench-dev{i:04}");
            allocated_claim(
                client,
                "bench",
                &name,
                NODE,
                &[("r", &dev)],
                json!([]),
                &[&p],
            )
            .await
        }))
        .await?;
        out.extend(made);
    }
    Ok(out)
}

async fn prepare(node: &DraNode, claims: &[ResourceClaim]) -> anyhow::Result<f64> {
    let mut dra = node.dra().await?;
    let t = Instant::now();
    let r = dra
        .node_prepare_resources(v1::NodePrepareResourcesRequest {
            claims: claims.iter().map(claim_msg).collect(),
        })
        .await?
        .into_inner();
    let us = t.elapsed().as_secs_f64() * 1e6;
    ensure!(r.claims.len() == claims.len());
    for (uid, c) in &r.claims {
        ensure!(c.error.is_empty(), "{uid}: {}", c.error);
    }
    Ok(us)
}

/// Restarts graft-driver, with `--pod-cache` or without, and waits until it serves; then
/// prepares `warm` again (unprepared first), so that its connections to the API server are
/// open before the timed call, as in a driver that has run a while.
async fn restart(
    node: &mut DraNode,
    pod_cache: bool,
    warm: &[ResourceClaim],
) -> anyhow::Result<()> {
    node.driver.terminate()?;
    node.driver.opts.extra.retain(|a| a != "--pod-cache");
    if pod_cache {
        node.driver.opts.extra.push("--pod-cache".into());
    }
    node.driver.spawn(None)?;
    let (_, endpoint) = node.driver.wait_registered(Duration::from_secs(30)).await?;
    node.endpoint = endpoint;
    // The watch's first list done before the first call.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let msgs: Vec<v1::Claim> = warm.iter().map(claim_msg).collect();
    unprepare(node, &msgs).await?;
    prepare(node, warm).await?;
    Ok(())
}

async fn slice_devices(client: &kube::Client) -> anyhow::Result<usize> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let lp =
        ListParams::default().fields(&format!("spec.driver={DRIVER_NAME},spec.nodeName={NODE}"));
    Ok(api
        .list(&lp)
        .await?
        .items
        .iter()
        .map(|s| s.spec.devices.as_ref().map_or(0, |d| d.len()))
        .sum())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let cp = apiserver::shared()?;
    let devdir = std::path::Path::new("/dev/graft-bench");
    let _ = std::fs::remove_dir_all(devdir);
    std::fs::create_dir(devdir)?;
    for i in 0..DEVICES {
        // The node is /dev/null's.
        let p = devdir.join(format!("dev{i:04}"));
        mknod(
            &p,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o600),
            makedev(1, 3),
        )
        .with_context(|| format!("mknod {}", p.display()))?;
    }
    let config = format!(
        "[[devices]]\npath = \"{}/dev*\"\nattributes = {{ type = \"bench\" }}\n",
        devdir.display()
    );
    // First a node with three devices, for the idle footprint of a typical node.
    let small = "[[devices]]\npath = \"/dev/null\"\n[[devices]]\npath = \"/dev/zero\"\n[[devices]]\npath = \"/dev/full\"\n";
    let mut node = DraNode::start(cp, NODE, small).await?;
    let client = node.client.clone();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_small = rss_kib(node.driver.pid().context("no driver")?);
    std::fs::write(node.path("devices.toml"), &config)?;
    println!(
        "graft-driver benchmark: {DEVICES} devices, real kube-apiserver and etcd on this machine"
    );

    // Start to slices published, the slices deleted before each start (as after the
    // kubelet's wipe).
    let mut startup = Vec::new();
    for _ in 0..5 {
        node.driver.terminate()?;
        let api: Api<ResourceSlice> = Api::all(client.clone());
        api.delete_collection(
            &DeleteParams::default(),
            &ListParams::default().fields(&format!("spec.nodeName={NODE}")),
        )
        .await?;
        while slice_devices(&client).await? != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let t = Instant::now();
        node.driver.spawn(None)?;
        while slice_devices(&client).await? != DEVICES {
            ensure!(
                t.elapsed() < Duration::from_secs(30),
                "slices not published"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        startup.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (_, endpoint) = node.driver.wait_registered(Duration::from_secs(30)).await?;
    node.endpoint = endpoint;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pid = node.driver.pid().context("no driver")?;
    let rss_idle = rss_kib(pid);

    namespace(&client, "bench").await?;
    let singles = make_claims(&client, 0..SINGLE).await?;
    let batches = make_claims(&client, SINGLE..DEVICES).await?;
    let log_before = logged_timings(&node.driver.log_text()).len();

    let mut single_total = Vec::new();
    for c in &singles {
        single_total.push(
            prepare(&node, std::slice::from_ref(c))
                .await
                .with_context(|| node.driver.log_text())?,
        );
    }
    let mut batch_total = Vec::new();
    for chunk in batches.chunks(BATCH) {
        batch_total.push(prepare(&node, chunk).await?);
    }
    let rss_full = rss_kib(pid);

    let calls = single_total.len() + batch_total.len();
    let timings = timings_at_least(&node, log_before + calls).await;
    let timings = &timings[log_before..];
    ensure!(timings.len() == calls, "driver log lacks timings");
    let (st, bt) = timings.split_at(SINGLE);
    let mut s_fetch: Vec<f64> = st.iter().map(|t| t.0).collect();
    let mut s_local: Vec<f64> = st.iter().map(|t| t.1).collect();
    let mut b_fetch: Vec<f64> = bt.iter().map(|t| t.0).collect();
    let mut b_local: Vec<f64> = bt.iter().map(|t| t.1).collect();

    println!();
    println!("| measure | p50 | p99 | max |");
    println!("|---|---|---|---|");
    let row = |name: &str, v: &mut Vec<f64>, unit: &str, div: f64| {
        let (a, b, c) = (pct(v, 0.5) / div, pct(v, 0.99) / div, pct(v, 1.0) / div);
        println!("| {name} | {a:.2} {unit} | {b:.2} {unit} | {c:.2} {unit} |");
    };
    row(
        "start to all slices published (5 starts)",
        &mut startup,
        "ms",
        1.0,
    );
    row(
        &format!("one claim, gRPC round trip ({SINGLE} calls)"),
        &mut single_total,
        "ms",
        1e3,
    );
    row("one claim, API reads (driver log)", &mut s_fetch, "ms", 1e3);
    row(
        "one claim, local work (driver log)",
        &mut s_local,
        "ms",
        1e3,
    );
    row(
        &format!(
            "batch of {BATCH}, gRPC round trip ({} calls)",
            batch_total.len()
        ),
        &mut batch_total,
        "ms",
        1e3,
    );
    row(
        "batch of 100, API reads (driver log)",
        &mut b_fetch,
        "ms",
        1e3,
    );
    row(
        "batch of 100, local work (driver log)",
        &mut b_local,
        "ms",
        1e3,
    );

    // The batches again, without and with the pod cache, alternating.
    let mut reads = [Vec::new(), Vec::new()];
    let mut mode = false;
    for chunk in batches.chunks(BATCH) {
        for cached in [false, true] {
            if cached != mode {
                restart(&mut node, cached, &singles[..16]).await?;
                mode = cached;
            }
            let msgs: Vec<v1::Claim> = chunk.iter().map(claim_msg).collect();
            for (uid, e) in unprepare(&node, &msgs).await? {
                ensure!(e.is_empty(), "unprepare {uid}: {e}");
            }
            let before = logged_timings(&node.driver.log_text()).len();
            prepare(&node, chunk).await?;
            let after = timings_at_least(&node, before + 1).await;
            ensure!(after.len() == before + 1, "driver log lacks the timing");
            reads[usize::from(cached)].push(after[before].0);
        }
    }
    let [mut plain, mut cached] = reads;
    println!();
    println!(
        "| batch of 100, API reads, side by side ({} each) | p50 | max |",
        plain.len()
    );
    println!("|---|---|---|");
    let (p, c) = (pct(&mut plain, 0.5), pct(&mut cached, 0.5));
    println!(
        "| GET each claim and pod | {:.2} ms | {:.2} ms |",
        p / 1e3,
        pct(&mut plain, 1.0) / 1e3
    );
    println!(
        "| GET each claim, pods from the pod cache | {:.2} ms | {:.2} ms |",
        c / 1e3,
        pct(&mut cached, 1.0) / 1e3
    );
    println!("ratio of p50s, cache / GETs: {:.2}", c / p);
    println!();
    let mib = |k: u64| k as f64 / 1024.0;
    // Anonymous plus dirty is graft-driver's own cost; the clean file pages are its binary's,
    // which the kernel maps and can drop (charged to the pod's cgroup all the same).
    for (what, f) in [
        ("idle with 3 devices published", rss_small),
        (&*format!("idle with {DEVICES} devices published"), rss_idle),
        (&*format!("with {DEVICES} prepared claims"), rss_full),
    ] {
        println!(
            "graft-driver {what}: RSS {:.1} MiB; anonymous + dirty {:.1} MiB ({:.1} anonymous, {:.1} dirty); clean private file pages {:.1} MiB",
            mib(f.rss),
            mib(f.own()),
            mib(f.anonymous),
            mib(f.dirty),
            mib(f.private_clean)
        );
    }
    drop(node);
    std::fs::remove_dir_all(devdir)?;
    Ok(())
}
