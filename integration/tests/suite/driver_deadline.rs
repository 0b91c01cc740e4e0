//! graft-driver's answers under the kubelet's deadline, through its DRA socket with a real
//! API server and graft-nri on a real containerd: a device setup that outlasts the call (a
//! VFIO bind on a fake node where no kernel ever unbinds the GPU) is answered "still
//! running" while it goes on; a claim on another device is prepared meanwhile without
//! waiting for it; the kubelet's retry gets the setup's own error, at once.

use std::time::{Duration, Instant};

use anyhow::ensure;
use graft_integration::apiserver;
use graft_integration::claims;
use graft_integration::dra_node::{prepare, DraNode};
use graft_integration::fake_gpu::FakeNode;
use k8s_openapi::api::resource::v1::ResourceClaim;

/// The VFIO setup gives up after this; the call is answered after `BUDGET`.
const VFIO_TIMEOUT_S: u64 = 6;
const BUDGET_S: u64 = 2;

async fn claim_for(
    client: &kube::Client,
    name: &str,
    device: &str,
) -> anyhow::Result<ResourceClaim> {
    let p = claims::pod(client, "dl", name, &[("d", name)], &[("c", &[("d", "")])]).await?;
    claims::allocated_claim(
        client,
        "dl",
        name,
        "dl-node",
        &[("r", device)],
        serde_json::json!([]),
        &[&p],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_past_the_deadline_goes_on_and_its_result_reaches_the_retry() -> anyhow::Result<()>
{
    let dir = tempfile::Builder::new().prefix("gdl").tempdir_in("/tmp")?;
    let node = FakeNode::create(dir.path())?;
    let hook = graft_integration::testbed::static_hook()?;
    let mut args =
        node.passthrough_driver_args(&dir.path().join("bin/graft-hook"), &hook, VFIO_TIMEOUT_S);
    args.extend([
        "--deadline-margin-seconds".into(),
        (45 - BUDGET_S).to_string(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let dra = DraNode::start_with(apiserver::shared()?, "dl-node", "", &args).await?;
    let client = &dra.client;
    claims::namespace(client, "dl").await?;
    // The inventory is in place before the DRA socket is served: no wait for slices.
    let vfio = claim_for(client, "vfio", "vfio-0000-18-00-0").await?;
    let t = Instant::now();
    let r = prepare(&dra, &[&vfio]).await?;
    let first = t.elapsed();
    let e = &r[&claims::uid(&vfio)].error;
    ensure!(e.contains("still running"), "first answer: {e:?}");
    ensure!(
        first < Duration::from_secs(BUDGET_S + 3),
        "answered after {first:?}, the budget is {BUDGET_S} s"
    );
    println!("VFIO claim answered \"still running\" after {first:?}");

    // Meanwhile another GPU (another PCI function) prepares without waiting.
    let gpu = claim_for(client, "gpu", "gpu-0").await?;
    let t = Instant::now();
    let r = prepare(&dra, &[&gpu]).await?;
    ensure!(r[&claims::uid(&gpu)].error.is_empty(), "{r:?}");
    let fast = t.elapsed();
    ensure!(fast < Duration::from_secs(BUDGET_S), "gpu-0 took {fast:?}");
    println!("gpu-0 prepared in {fast:?} while the VFIO setup runs");

    // The setup gives up; the retry after that gets its error without a new attempt.
    let left = Duration::from_secs(VFIO_TIMEOUT_S + 1).saturating_sub(first + fast);
    tokio::time::sleep(left).await;
    let t = Instant::now();
    let r = prepare(&dra, &[&vfio]).await?;
    let e = &r[&claims::uid(&vfio)].error;
    ensure!(
        e.contains(&format!(
            "0000:18:00.0 still bound to nvidia after {VFIO_TIMEOUT_S}s"
        )),
        "retry: {e:?}"
    );
    ensure!(
        t.elapsed() < Duration::from_secs(BUDGET_S),
        "retry took {:?}",
        t.elapsed()
    );
    ensure!(
        dra.record(&claims::uid(&vfio))?.is_none(),
        "a failed claim left a record"
    );

    // Once reported, the next retry tries again (and is again answered in time).
    let t = Instant::now();
    let e = prepare(&dra, &[&vfio]).await?[&claims::uid(&vfio)]
        .error
        .clone();
    ensure!(e.contains("still running"), "{e:?}");
    ensure!(t.elapsed() < Duration::from_secs(BUDGET_S + 3));
    Ok(())
}
