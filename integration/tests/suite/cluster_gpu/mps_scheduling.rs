//! MPS tenancy decided by the scheduler: while a namespace holds an MPS GPU, graft-driver
//! taints it `graft.dev/mps-tenant=<namespace>` and the chart's admission policy gives each
//! claim only its own namespace's toleration (templates/56-mps-tenancy.yaml). Another
//! namespace's share goes to another MPS GPU, or stays Pending and unbound with the
//! scheduler's reason, never bound to a node that refuses it at prepare.

use std::time::Instant;

use anyhow::{ensure, Context};
use graft_integration::cluster::gpu::{GpuValues, CHECK_NAMESPACE};
use graft_integration::cluster::workloads::{pod_claim, wait_running};
use graft_integration::cluster::{wait_until, Cluster};
use graft_integration::fake_gpu::FakeNode;

use super::mps_support::*;

/// Two GPUs shared through MPS.
pub fn values() -> GpuValues {
    GpuValues {
        mps: "4,5".into(),
        helm: vec!["--set".into(), format!("nvidia.mpsShmSize={SHM_SIZE}")],
        ..Default::default()
    }
}

const HOLD: &str = "echo DONE; sleep 3600";

/// The device the pod's claim was allocated.
fn device_of(c: &Cluster, ns: &str, pod: &str) -> anyhow::Result<String> {
    c.kubectl(&[
        "-n",
        ns,
        "get",
        "resourceclaim",
        &pod_claim(c, ns, pod)?,
        "-o",
        "jsonpath={.status.allocation.devices.results[0].device}",
    ])
    .map(|d| d.trim().to_string())
}

/// `device=tenant` for each MPS tenancy taint of graft's slices.
fn tenancy_taints(c: &Cluster) -> anyhow::Result<Vec<String>> {
    let out = c.kubectl(&["get", "resourceslices", "-o", "json"])?;
    let v: serde_json::Value = serde_json::from_str(&out)?;
    let mut found = Vec::new();
    for s in v["items"].as_array().into_iter().flatten() {
        for d in s["spec"]["devices"].as_array().into_iter().flatten() {
            for t in d["taints"].as_array().into_iter().flatten() {
                if t["key"] == "graft.dev/mps-tenant" {
                    ensure!(t["effect"] == "NoSchedule", "{t}");
                    found.push(format!(
                        "{}={}",
                        d["name"].as_str().unwrap_or(""),
                        t["value"].as_str().unwrap_or("")
                    ));
                }
            }
        }
    }
    found.sort();
    Ok(found)
}

fn share(ns: &str, name: &str) -> String {
    share_pod(
        ns,
        name,
        20,
        "1Gi",
        None,
        &format!("graft-cuda-probe; {HOLD}"),
    )
}

pub fn second_namespace_goes_elsewhere(c: &Cluster, node: &FakeNode) -> anyhow::Result<()> {
    import_probe_image(node)?;
    graft_mps_ready(c)?;

    // A takes one of the two MPS GPUs; graft-driver taints it with A's name.
    c.apply(&share("a", "mps-a1"))?;
    wait_running(c, "a", "mps-a1")?;
    let a_gpu = device_of(c, "a", "mps-a1")?;
    let want = vec![format!("{a_gpu}=a")];
    wait_until("A's GPU is not tainted with A's tenancy", || {
        Ok(tenancy_taints(c)? == want)
    })?;

    // B's share lands on the other MPS GPU, without any refusal on the node.
    c.apply(&share("b", "mps-b1"))?;
    wait_running(c, "b", "mps-b1")?;
    let b_gpu = device_of(c, "b", "mps-b1")?;
    ensure!(b_gpu != a_gpu, "b's share was given a's GPU {a_gpu}");
    ensure!(
        !pod_events(c, "b", "mps-b1")?.contains("MPS cannot keep two namespaces apart"),
        "{}",
        pod_events(c, "b", "mps-b1")?
    );
    // A's own namespace still shares its GPU: its toleration is its own.
    c.apply(&share("a", "mps-a2"))?;
    wait_running(c, "a", "mps-a2")?;
    ensure!(
        device_of(c, "a", "mps-a2")? == a_gpu,
        "a's second share left a's GPU"
    );
    let mut want = vec![format!("{a_gpu}=a"), format!("{b_gpu}=b")];
    want.sort();
    wait_until("both GPUs are not tainted with their tenants", || {
        Ok(tenancy_taints(c)? == want)
    })?;

    // A third namespace finds no MPS GPU free: Pending, never bound, with the scheduler's
    // reason (no node prepared anything for it).
    let third = CHECK_NAMESPACE;
    c.apply(&share(third, "mps-c1"))?;
    let why = stays_unschedulable(c, third, "mps-c1")?;
    println!("the third namespace waits: {why}");

    // Once A leaves, its GPU is untainted and the waiting share runs there.
    let start = Instant::now();
    c.kubectl(&[
        "-n",
        "a",
        "delete",
        "pod",
        "mps-a1",
        "mps-a2",
        "--wait=false",
    ])?;
    wait_running(c, third, "mps-c1").context("after a left")?;
    println!(
        "the third namespace's share ran {:?} after a's pods were deleted",
        start.elapsed()
    );
    ensure!(device_of(c, third, "mps-c1")? == a_gpu);
    Ok(())
}
