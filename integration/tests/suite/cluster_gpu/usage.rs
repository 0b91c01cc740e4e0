//! GPU usage by the pod that uses it, with the chart's GPU setup: three pods, each busy on
//! its own kind of device of the fake node, and graft-driver's metrics name each one's
//! namespace, pod and container:
//! - a whole GPU (index 0): utilisation, memory used and power;
//! - a static MIG device, asked as `nvidia.com/mig-1g.10gb` (GPU 7's GPU instance 13):
//!   memory used (NVML reports no utilisation for MIG);
//! - an MPS share (GPU 4): the memory its client process uses, found by the process's
//!   cgroup under the node's /proc (the fake node's: the test copies the real process's
//!   cgroup there, as the kernel shows it).
//!
//! The fake NVML reads the figures from `fake-nvml-usage` (integration/fake-nvml/src/usage.rs).

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use graft_integration::cluster::gpu::{GpuValues, FAKE_DIR};
use graft_integration::cluster::workloads::{
    claim_template_consuming, one_claim_pod, wait_unprepared,
};
use graft_integration::cluster::Cluster;
use graft_integration::fake_gpu::FakeNode;
use graft_integration::scrape;

/// MPS on GPU 4, usage read every second.
pub fn values() -> GpuValues {
    GpuValues {
        mps: "4".into(),
        helm: vec!["--set".into(), "nvidia.usageMetricsSeconds=1".into()],
        ..Default::default()
    }
}

const HOLD: &str = "echo DONE; sleep 3600";

/// The host pid of pod `pod`'s container `app`: the process whose cgroup names the
/// container's id.
fn pid_of(c: &Cluster, pod: &str) -> anyhow::Result<(u32, String)> {
    let id = c.kubectl(&[
        "get",
        "pod",
        pod,
        "-o",
        "jsonpath={.status.containerStatuses[0].containerID}",
    ])?;
    let id = id.trim().trim_start_matches("containerd://").to_string();
    for e in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(cg) = std::fs::read_to_string(e.path().join("cgroup")) {
            if cg.contains(&id) {
                return Ok((pid, cg));
            }
        }
    }
    bail!("no process in container {id} of {pod}")
}

pub fn gpu_metrics_name_the_pod(c: &Cluster, node: &FakeNode) -> anyhow::Result<()> {
    let index0 = r#"device.attributes["graft.dev"].index == 0"#;
    c.apply(
        &(claim_template_consuming("busy-gpu", "gpu.graft.dev", Some(index0), None)
            + &one_claim_pod("busy-gpu", "gpu", HOLD)),
    )?;
    c.apply(&super::device_plugin::pod(
        "busy-mig",
        "nvidia.com/mig-1g.10gb",
        1,
    ))?;
    let mps = r#"device.attributes["graft.dev"].?sharing.orValue("") == "mps""#;
    c.apply(
        &(claim_template_consuming(
            "busy-mps",
            "gpu.graft.dev",
            Some(mps),
            Some("{compute: 50}"),
        ) + &one_claim_pod("busy-mps", "share", HOLD)),
    )?;
    for p in ["busy-gpu", "busy-mig", "busy-mps"] {
        c.wait_phase(p, "Running")?;
    }
    let (pid, cgroup) = pid_of(c, "busy-mps")?;
    let proc_dir = std::path::Path::new(FAKE_DIR)
        .join("proc")
        .join(pid.to_string());
    std::fs::create_dir_all(&proc_dir)?;
    std::fs::write(proc_dir.join("cgroup"), &cgroup)?;
    let usage = node.mig_config_file().with_file_name("fake-nvml-usage");
    std::fs::write(
        &usage,
        format!("gpu 0 util 87 memory 2048 power 250000\nmig 7 13 memory 1024\nmps 4 {pid} 512\n"),
    )
    .with_context(|| usage.display().to_string())?;

    let result = (|| {
        let want = [
            (
                "graft_gpu_utilization_ratio{namespace=\"default\",pod=\"busy-gpu\",container=\"app\",claim=",
                0.87,
            ),
            (
                "graft_gpu_power_watts{namespace=\"default\",pod=\"busy-gpu\",container=\"app\",claim=",
                250.0,
            ),
            (
                "graft_gpu_memory_used_bytes{namespace=\"default\",pod=\"busy-gpu\",container=\"app\",claim=",
                2048.0 * 1048576.0,
            ),
            (
                "graft_gpu_memory_used_bytes{namespace=\"default\",pod=\"busy-mig\",container=\"app\",claim=",
                1024.0 * 1048576.0,
            ),
            (
                "graft_gpu_memory_used_bytes{namespace=\"default\",pod=\"busy-mps\",container=\"app\",claim=",
                512.0 * 1048576.0,
            ),
        ];
        let start = Instant::now();
        let mut last = String::new();
        loop {
            if let Ok((200, m)) = c
                .metrics_addr(9477)
                .and_then(|a| scrape::tcp_get(&a, "/metrics"))
            {
                let missing: Vec<&str> = want
                    .iter()
                    .filter(|(prefix, v)| {
                        !m.lines().any(|l| {
                            l.starts_with(prefix)
                                && l.rsplit(' ').next().and_then(|x| x.parse::<f64>().ok())
                                    == Some(*v)
                        })
                    })
                    .map(|(p, _)| *p)
                    .collect();
                if missing.is_empty() {
                    for l in m.lines().filter(|l| l.starts_with("graft_gpu_")) {
                        println!("{l}");
                    }
                    // The MIG series carries its GPU instance for dcgm-exporter's join.
                    if !m
                        .lines()
                        .any(|l| l.contains("pod=\"busy-mig\"") && l.contains("GPU_I_ID=\"13\""))
                    {
                        bail!("the MIG series has no GPU_I_ID=\"13\":\n{m}");
                    }
                    return Ok(());
                }
                last = format!(
                    "missing {missing:?} in\n{}",
                    m.lines()
                        .filter(|l| l.starts_with("graft_gpu_"))
                        .collect::<Vec<_>>()
                        .join("\n")
                );
            }
            if start.elapsed() > Duration::from_secs(60) {
                bail!("{last}");
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    })();
    let _ = std::fs::remove_file(&usage);
    let _ = std::fs::remove_dir_all(&proc_dir);
    result?;
    c.kubectl(&[
        "delete",
        "pod",
        "busy-gpu",
        "busy-mig",
        "busy-mps",
        "--wait=true",
    ])?;
    c.kubectl(&[
        "delete",
        "resourceclaimtemplate",
        "busy-gpu",
        "busy-mps",
        "--wait=true",
    ])?;
    wait_unprepared(c)
}
