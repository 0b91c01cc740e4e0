//! Dynamic MIG on the cluster, with the GPU setup as shipped and the fake NVML's MIG rules
//! (H100 80GB): GPU index 5 (gpu-7) has MIG on and no instances, and graft partitions it.
//! A 4g.40gb and a 3g.40gb pod run side by side, each with its own instance made at
//! prepare; a 7g.80gb pod waits until both are gone; graft-driver restarting meanwhile
//! adopts its instances instead of taking them for the operator's; nothing is left after.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_integration::cluster::gpu::{GpuValues, MIG_STATE};
use graft_integration::cluster::{wait_until, workloads, Cluster};
use graft_integration::fake_gpu::FakeNode;

/// The GPU graft partitions, as --nvidia-dynamic-mig takes it.
pub const DYNAMIC_GPU: &str = "5";

/// The chart's values for it.
pub fn values() -> GpuValues {
    GpuValues {
        dynamic_mig: DYNAMIC_GPU.into(),
        ..Default::default()
    }
}

/// Its MIG mode on, before graft starts.
pub fn before_start(node: &FakeNode) -> anyhow::Result<()> {
    node.configure_mig(&format!("mig {DYNAMIC_GPU} on\nstate {MIG_STATE}\n"))
}

fn mig_pod(name: &str, profile: &str) -> String {
    let cel = format!(
        r#"device.attributes["graft.dev"].profile == "{profile}" && device.attributes["graft.dev"].parentIndex == {DYNAMIC_GPU}"#
    );
    workloads::claim_template(name, "mig.graft.dev", Some(&cel))
        + &workloads::one_claim_pod(
            name,
            "mig",
            "ls /dev/nvidia-caps/ /dev/ | grep nvidia; echo DONE; sleep 3600",
        )
}

/// The fake GPU's instances on the dynamic GPU, as `(profile name, start)`.
fn instances() -> anyhow::Result<Vec<(u32, u32)>> {
    Ok(
        FakeNode::mig_instances(Path::new(graft_integration::cluster::gpu::MIG_STATE))?
            .into_iter()
            .filter(|i| i.gpu.to_string() == DYNAMIC_GPU)
            .map(|i| (i.profile, i.start))
            .collect(),
    )
}

fn published(c: &Cluster) -> anyhow::Result<String> {
    c.kubectl(&["get", "resourceslices", "-o", "json"])
}

/// The GPU instance profile ids of the H100 (NVML_GPU_INSTANCE_PROFILE_*).
const P_1G: u32 = 0;
const P_2G: u32 = 1;
const P_3G: u32 = 2;
const P_4G: u32 = 3;
const P_7G: u32 = 4;

pub fn dynamic_mig(c: &Cluster, _node: &FakeNode) -> anyhow::Result<()> {
    wait_until("the dynamic MIG placements were never published", || {
        let s = published(c)?;
        Ok(s.contains("\"gpu-7-mig-3g-40gb-4\"") && s.contains("\"gpu-7-mig\""))
    })?;
    ensure!(
        instances()?.is_empty(),
        "instances before any claim: {:?}",
        instances()?
    );

    // 4g.40gb has one placement (slices 0-3), so it goes first; 3g.40gb then fits at 4-7.
    let started = Instant::now();
    c.apply(&mig_pod("mig-b", "4g.40gb"))?;
    c.wait_phase("mig-b", "Running")?;
    let first = started.elapsed();
    c.apply(&mig_pod("mig-a", "3g.40gb"))?;
    c.wait_phase("mig-a", "Running")?;
    for pod in ["mig-a", "mig-b"] {
        let log = workloads::wait_log(c, pod, "app", "DONE")?;
        ensure!(
            log.matches("nvidia-cap").count() >= 2 && log.contains("nvidia7"),
            "{pod} lacks its MIG capability nodes or its GPU's node:\n{log}"
        );
    }
    let mut have = instances()?;
    have.sort();
    ensure!(have == [(P_3G, 4), (P_4G, 0)], "instances: {have:?}");

    // A 7g.80gb would need every slice: the scheduler keeps it pending.
    c.apply(&mig_pod("mig-c", "7g.80gb"))?;
    std::thread::sleep(Duration::from_secs(8));
    ensure!(
        c.pod_phase("mig-c") == "Pending",
        "7g.80gb pod is {:?} while 3g and 4g instances exist",
        c.pod_phase("mig-c")
    );

    // graft-driver restarts: its instances are still its own (offered, adopted, and
    // destroyed at unprepare), not the operator's.
    workloads::restart_graft(c)?;
    wait_until(
        "gpu-7-mig-3g-40gb-4 not offered after graft-driver restarted",
        || Ok(published(c)?.contains("\"gpu-7-mig-3g-40gb-4\"")),
    )?;

    c.kubectl(&["delete", "pod", "mig-a", "mig-b", "--wait=true"])?;
    c.wait_phase("mig-c", "Running")
        .context("the 7g.80gb pod did not run once the others were gone")?;
    let have = instances()?;
    ensure!(have == [(P_7G, 0)], "instances with the 7g pod: {have:?}");
    c.kubectl(&["delete", "pod", "mig-c", "--wait=true"])?;
    workloads::wait_unprepared(c)?;
    wait_until(
        "MIG instances left after every claim was unprepared",
        || Ok(instances()?.is_empty()),
    )?;
    eprintln!("dynamic MIG: first 4g.40gb pod Running {first:?} after creation");
    Ok(())
}

/// A 1g.10gb, then a 2g.20gb, then a 4g.40gb pod on the dynamic GPU: the scheduler's
/// first-fit over graft's placement order (docs/placement.md) puts the small ones at the
/// GPU's end, so the 4g instance, whose only placement is slices 0-3, still fits.
pub fn keeps_a_4g_slot(c: &Cluster) -> anyhow::Result<()> {
    wait_until("the dynamic MIG placements were never published", || {
        Ok(published(c)?.contains("\"gpu-7-mig-4g-40gb-0\""))
    })?;
    for (pod, profile) in [
        ("small", "1g.10gb"),
        ("medium", "2g.20gb"),
        ("large", "4g.40gb"),
    ] {
        c.apply(&mig_pod(pod, profile))?;
        c.wait_phase(pod, "Running")
            .with_context(|| format!("the {profile} pod, with {:?} in place", instances()))?;
    }
    let mut have = instances()?;
    have.sort();
    ensure!(
        have == [(P_1G, 6), (P_2G, 4), (P_4G, 0)],
        "instances: {have:?}"
    );
    c.kubectl(&["delete", "pod", "small", "medium", "large", "--wait=true"])?;
    workloads::wait_unprepared(c)?;
    wait_until(
        "MIG instances left after every claim was unprepared",
        || Ok(instances()?.is_empty()),
    )?;
    Ok(())
}
