//! MPS on a static MIG device (`nvidia.mps` listing a GPU in MIG mode): each of its MIG
//! devices is published with MPS capacity, a claim takes a share of one, and graft-mps runs
//! that device's daemon with `CUDA_VISIBLE_DEVICES` its MIG UUID and the instances' access
//! capabilities in its sandbox, without which the (fake) server refuses to start, as a
//! real one cannot open a MIG device without them. The fake node's GPU 7 (index) is in MIG
//! mode with a 1g.10gb instance (gi 13) preset.

use anyhow::{ensure, Context};
use graft_integration::cluster::gpu::GpuValues;
use graft_integration::cluster::workloads::{self, wait_running};
use graft_integration::cluster::Cluster;
use graft_integration::fake_gpu::FakeNode;

use super::mps_support::{
    control_log, gpu_dir, import_probe_image, probe_pod, server_log, stays_unschedulable, tenancy,
    CEL,
};

/// MPS on GPU index 7, in MIG mode.
pub fn values() -> GpuValues {
    GpuValues {
        mps: "7".into(),
        ..Default::default()
    }
}

/// A pod of `ns` whose claim takes `compute` % and 4Gi of an MPS 1g.10gb device.
fn pod(ns: &str, name: &str, compute: u32) -> String {
    let cel = format!(r#"{CEL} && device.attributes["graft.dev"].profile == "1g.10gb""#);
    let capacity = format!(r#"{{compute: "{compute}", memory: 4Gi}}"#);
    let command = r#"ls /dev/nvidia-caps; graft-cuda-probe; echo DONE; sleep 3600"#;
    workloads::claim_template_in(ns, name, "mig.graft.dev", Some(&cel), Some(&capacity))
        + &probe_pod(ns, name, "", command)
}

pub fn mps_on_a_mig_device(c: &Cluster, node: &FakeNode) -> anyhow::Result<()> {
    import_probe_image(node)?;
    super::mps_support::graft_mps_ready(c)?;
    c.apply(&pod("default", "mps-mig", 50))?;
    wait_running(c, "default", "mps-mig")?;
    let log = workloads::wait_log_in(c, "default", "mps-mig", "app", "DONE")?;
    ensure!(
        log.contains("PROBE PASS"),
        "the probe on the MIG share: {log}"
    );
    // graft-mps keeps the MIG device's state under its own UUID.
    let gpu = gpu_dir()?;
    let uuid = gpu
        .file_name()
        .context("the device directory")?
        .to_string_lossy()
        .to_string();
    ensure!(
        uuid.starts_with("MIG-"),
        "graft-mps serves {uuid}, not a MIG device"
    );
    let t = tenancy(&gpu)?;
    let control = control_log(&t);
    ensure!(
        control.contains(&format!("Startup CUDA_VISIBLE_DEVICES={uuid}")),
        "{control}"
    );
    let server = server_log(&t);
    ensure!(
        server.contains("active_thread_percentage 50 pinned_mem_limit 0=4096M"),
        "{server}"
    );
    println!("MPS on {uuid}: {}", log.trim());

    // The same namespace's second share joins that device's daemon (the tenancy policy
    // gives mig.graft.dev's claims their namespace's toleration); another namespace's waits
    // unscheduled: the device carries the first namespace's tenancy taint.
    c.apply(&pod("default", "mps-mig-2", 30))?;
    wait_running(c, "default", "mps-mig-2")?;
    let log = workloads::wait_log_in(c, "default", "mps-mig-2", "app", "DONE")?;
    ensure!(log.contains("PROBE PASS"), "the second share: {log}");
    ensure!(tenancy(&gpu)? == t, "a second tenancy on {uuid}");
    // The tenancy's limits are the two shares' sum, set on the daemon and its server.
    let control = control_log(&t);
    for want in [
        "Command set_default_active_thread_percentage 80",
        "Command set_default_device_pinned_mem_limit 0 8192M",
    ] {
        ensure!(control.contains(want), "{want:?} not in\n{control}");
    }
    c.apply(&pod("a", "mps-mig-a", 10))?;
    let why = stays_unschedulable(c, "a", "mps-mig-a")?;
    println!("another namespace's share of {uuid}: {why}");

    c.kubectl(&["-n", "a", "delete", "pod", "mps-mig-a", "--wait=true"])?;
    c.kubectl(&["delete", "pod", "mps-mig", "mps-mig-2", "--wait=true"])?;
    workloads::wait_unprepared(c)
}
