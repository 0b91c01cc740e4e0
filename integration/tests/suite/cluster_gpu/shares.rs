//! Time-slicing replicas through the chart (`nvidia.timeSlicing`): GPU index 0 offered as
//! three shares. Pods with claims of their own share it, one share each unless a claim
//! asks for more (`capacity.requests: {shares: 2}`); a claim that finds no share left
//! stays Pending with the scheduler's reason, and runs once a share is given back. Every
//! pod sees the same GPU. Then pods asking for the device plugin's renamed resource
//! (`nvidia.com/gpu.shared`) get shares of it too.

use anyhow::{ensure, Context};
use graft_integration::cluster::gpu::GpuValues;
use graft_integration::cluster::workloads::{
    claim_template_consuming, one_claim_pod, pod_claim, wait_failed_scheduling, wait_log,
    wait_unprepared,
};
use graft_integration::cluster::Cluster;
use serde_json::Value;

use super::device_plugin::{allocation, pod};

/// GPU index 0 as three shares, and the static MIG devices of GPU index 6 (MIG mode).
pub fn values() -> GpuValues {
    GpuValues {
        helm: vec![
            "--set".into(),
            "nvidia.timeSlicing.gpus=0\\,6".into(),
            "--set".into(),
            "nvidia.timeSlicing.replicas=3".into(),
        ],
        ..Default::default()
    }
}

const SHARED: &str = r#"device.attributes["graft.dev"].?sharing.orValue("") == "timeSlicing""#;

const SHOW: &str = "ls /dev | grep -E '^nvidia[0-9]+$'; echo DONE; sleep 3600";

/// A pod `name` with a claim of its own for `shares` shares of a time-sliced GPU.
fn share_pod(name: &str, shares: u32) -> String {
    let capacity = (shares != 1).then(|| format!("{{shares: {shares}}}"));
    claim_template_consuming(name, "gpu.graft.dev", Some(SHARED), capacity.as_deref())
        + &one_claim_pod(name, "dev", SHOW)
}

/// The device, share id and consumed shares of pod `pod`'s claim.
fn allocated(c: &Cluster, pod: &str) -> anyhow::Result<(String, String, String)> {
    let claim = pod_claim(c, "default", pod)?;
    let v: Value =
        serde_json::from_str(&c.kubectl(&["get", "resourceclaim", &claim, "-o", "json"])?)?;
    let r = &v["status"]["allocation"]["devices"]["results"][0];
    let text = |x: &Value| x.as_str().unwrap_or_default().to_string();
    ensure!(!r.is_null(), "{claim} not allocated: {v}");
    Ok((
        text(&r["device"]),
        text(&r["shareID"]),
        text(&r["consumedCapacity"]["shares"]),
    ))
}

pub fn shares_across_claims(c: &Cluster) -> anyhow::Result<()> {
    c.apply(&share_pod("share-a", 1))?;
    c.apply(&share_pod("share-b", 2))?;
    c.wait_phase("share-a", "Running")?;
    c.wait_phase("share-b", "Running")?;
    let a = allocated(c, "share-a")?;
    let b = allocated(c, "share-b")?;
    ensure!(
        a.0 == b.0 && !a.1.is_empty() && !b.1.is_empty() && a.1 != b.1,
        "two claims, one GPU, two shares: {a:?} {b:?}"
    );
    ensure!(a.2 == "1" && b.2 == "2", "consumed shares: {a:?} {b:?}");
    let seen_a = wait_log(c, "share-a", "app", "DONE")?;
    let seen_b = wait_log(c, "share-b", "app", "DONE")?;
    ensure!(
        seen_a == seen_b && seen_a.lines().count() == 2,
        "the shares see different GPUs:\n{seen_a}\n{seen_b}"
    );

    // No share left: the third waits, unbound, with the scheduler's reason.
    c.apply(&share_pod("share-c", 1))?;
    wait_failed_scheduling(c, "share-c", "every share taken")?;
    let node = c.kubectl(&["get", "pod", "share-c", "-o", "jsonpath={.spec.nodeName}"])?;
    ensure!(node.trim().is_empty(), "share-c was bound to {node}");

    c.kubectl(&["delete", "pod", "share-b", "--wait=true"])?;
    c.wait_phase("share-c", "Running")?;
    let cc = allocated(c, "share-c")?;
    ensure!(
        cc.0 == a.0,
        "share-c got {cc:?}, not the shared GPU {}",
        a.0
    );
    let seen_c = wait_log(c, "share-c", "app", "DONE")?;
    ensure!(seen_c == seen_a, "{seen_c}");
    println!("shares of {}: a {a:?}, b {b:?}, c {cc:?}", a.0);

    c.kubectl(&["delete", "pod", "share-a", "share-c", "--wait=true"])?;
    for t in ["share-a", "share-b", "share-c"] {
        c.kubectl(&["delete", "resourceclaimtemplate", t, "--wait=true"])
            .with_context(|| t.to_string())?;
    }
    wait_unprepared(c)?;
    renamed_shares(c, &a.0)?;
    mig_shares(c)
}

/// Two claims time-share one static MIG device of GPU index 6 (gpu-4: two 3g.40gb devices).
fn mig_shares(c: &Cluster) -> anyhow::Result<()> {
    let names = ["mig-share-a", "mig-share-b"];
    let cel = format!(r#"{SHARED} && device.attributes["graft.dev"].profile == "3g.40gb""#);
    for name in names {
        c.apply(
            &(claim_template_consuming(name, "mig.graft.dev", Some(&cel), None)
                + &one_claim_pod(name, "dev", SHOW)),
        )?;
    }
    let mut got = Vec::new();
    for name in names {
        c.wait_phase(name, "Running")?;
        got.push(allocated(c, name)?);
    }
    ensure!(
        got[0].0 == got[1].0 && got[0].0.starts_with("gpu-4-mig-") && got[0].1 != got[1].1,
        "two shares of one MIG device: {got:?}"
    );
    c.kubectl(&["delete", "pod", names[0], names[1], "--wait=true"])?;
    for t in names {
        c.kubectl(&["delete", "resourceclaimtemplate", t, "--wait=true"])?;
    }
    wait_unprepared(c)
}

/// Pods written for the device plugin with `renameByDefault: true` ask for
/// `nvidia.com/gpu.shared` (gpu-shared.graft.dev): two of them run on shares of the one
/// time-sliced GPU, `shared`, none on a GPU of its own.
fn renamed_shares(c: &Cluster, shared: &str) -> anyhow::Result<()> {
    let names = ["renamed-a", "renamed-b"];
    for name in names {
        c.apply(&pod(name, "nvidia.com/gpu.shared", 1))?;
    }
    for name in names {
        c.wait_phase(name, "Running")?;
        let got = allocation(c, name, "nvidia.com/gpu.shared")?;
        ensure!(
            got.len() == 1 && got[0].0 == shared,
            "{name}: nvidia.com/gpu.shared: 1 got {got:?}, not a share of {shared}"
        );
    }
    c.kubectl(&["delete", "pod", names[0], names[1], "--wait=true"])?;
    wait_unprepared(c)
}
