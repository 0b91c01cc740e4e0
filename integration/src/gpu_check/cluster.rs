//! The check's cluster stage: graft as users deploy it. The testbed's single-node
//! Kubernetes runs on the node, graft is installed from its chart with the GPU values
//! (values-gpu.yaml, the node's driver root), and pods ask for the GPU through a
//! ResourceClaim: a container with the claim runs nvidia-smi and the CUDA probe, its
//! sibling without the claim must see no GPU, graft-driver must have registered every GPU
//! for health events, and two MPS shares of one GPU run the probe side by side with their
//! limits. It changes no GPU setting (no MIG, compute or persistence mode, clocks, reset).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use graft_driver::model::Device;
use serde_json::json;

use super::containers::{self, parse, script};
use super::discover::attr;
use super::image::{IMAGE, PROBE};
use super::report::{self, Report};
use crate::cluster::gpu::GpuValues;
use crate::cluster::Cluster;

/// Where the stage's pods run (the GPU bed of `cluster::gpu` makes it too).
pub use crate::cluster::gpu::CHECK_NAMESPACE as NAMESPACE;
const LIMIT: Duration = Duration::from_secs(300);

/// Installs graft with the given values and returns once it has published the node's GPUs:
/// on a real node `Cluster::deploy_graft_gpu` with its driver root, on the fake node the
/// GPU tests' fresh install.
pub type Deploy<'a> = dyn FnMut(&GpuValues) -> anyhow::Result<()> + 'a;

/// A pod of the check: containers `(name, claims the GPU, commands)`, all in the check's
/// image, with the claim from a template that pins the GPU by UUID and optionally asks for
/// part of a shared GPU (`capacity`, the YAML map of `capacity.requests`).
fn pod_yaml(
    name: &str,
    uuid: &str,
    capacity: Option<&str>,
    ctrs: &[(&str, bool, String)],
) -> String {
    let cel = format!(r#"device.attributes["graft.dev"].uuid == "{uuid}""#);
    let template = crate::cluster::workloads::claim_template_in(
        NAMESPACE,
        name,
        "gpu.graft.dev",
        Some(&cel),
        capacity,
    );
    let containers: Vec<serde_json::Value> = ctrs
        .iter()
        .map(|(ctr, claims, cmd)| {
            let mut c = json!({
                "name": ctr,
                "image": IMAGE,
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", format!("{cmd}sleep 3600\n")],
            });
            if *claims {
                c["resources"] = json!({"claims": [{"name": "gpu"}]});
            }
            c
        })
        .collect();
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}],
            "containers": containers,
        },
    });
    format!("{template}---\n{pod}\n")
}

/// Waits until every container of `pod` logged its last marker; returns their sections.
fn sections(c: &Cluster, pod: &str, ctrs: &[&str]) -> Vec<(String, report::Run)> {
    let start = Instant::now();
    let mut out = Vec::new();
    for ctr in ctrs {
        let run = loop {
            let log = c
                .kubectl(&["-n", NAMESPACE, "logs", pod, "-c", ctr])
                .unwrap_or_default();
            if log.contains(containers::DONE) {
                break Ok(parse(&log));
            }
            if start.elapsed() > LIMIT {
                let d = c
                    .kubectl(&["-n", NAMESPACE, "describe", "pod", pod])
                    .unwrap_or_default();
                break Err(report::NotRun::Unfinished {
                    pod: pod.to_string(),
                    container: ctr.to_string(),
                    limit: LIMIT,
                    described: d,
                });
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        out.push((ctr.to_string(), run));
    }
    out
}

fn delete_pods(c: &Cluster) -> anyhow::Result<()> {
    c.kubectl(&["-n", NAMESPACE, "delete", "pods", "--all", "--wait=true"])?;
    crate::cluster::workloads::wait_unprepared(c)
}

/// Imports the check's image (busybox, the host's glibc, the probe) into the cluster's
/// containerd.
pub fn import_image(tar: &Path) -> anyhow::Result<()> {
    let tb = crate::testbed::Testbed::load()?;
    crate::cluster::run(
        Command::new(tb.containerd_24.join("ctr"))
            .args(["-a", "/run/graft-cluster/containerd.sock", "-n", "k8s.io"])
            .args(["images", "import"])
            .arg(tar),
    )?;
    Ok(())
}

/// The cluster stage on `dev` (a full GPU, or a MIG device when every GPU is in MIG mode),
/// its results added to `r`. The image must be imported already ([`import_image`]).
pub fn run(
    c: &Cluster,
    deploy: &mut Deploy<'_>,
    dev: &Device,
    index: Option<u32>,
    r: &mut Report,
) -> anyhow::Result<()> {
    c.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NAMESPACE}}}\n"
    ))?;
    deploy(&GpuValues::default())?;
    let uuid = attr(dev, "uuid");
    let gpu = pod_yaml(
        "claim",
        &uuid,
        None,
        &[
            ("gpu", true, script(&containers::gpu_commands())),
            ("sibling", false, script(&containers::sibling_commands())),
        ],
    );
    c.apply(&gpu)?;
    let mut runs = sections(c, "claim", &["gpu", "sibling"]).into_iter();
    let (_, gpu_run) = runs.next().context("no gpu container")?;
    let (_, sibling_run) = runs.next().context("no sibling container")?;
    report::check_gpu(r, "cluster: ", &gpu_run, dev);
    report::check_sibling(r, "cluster: ", &sibling_run);
    r.containers.push((
        format!(
            "Cluster pod `claim`, container `gpu` (claims {}, {uuid})",
            dev.name
        ),
        report::container_body(&gpu_run),
    ));
    r.containers.push((
        "Cluster pod `claim`, container `sibling` (no claim)".into(),
        report::container_body(&sibling_run),
    ));
    health_registered(c, r)?;
    delete_pods(c)?;

    match index {
        Some(i) => mps(c, deploy, &uuid, i, r)?,
        None => r.notes.push(format!(
            "MPS not checked: {} is not a full GPU (MIG mode is on everywhere)",
            dev.name
        )),
    }
    Ok(())
}

/// graft-driver registered every GPU it publishes for NVML health events (its log line
/// `GPU health: watching NVML events gpus=N`); nothing is injected into a real GPU.
fn health_registered(c: &Cluster, r: &mut Report) -> anyhow::Result<()> {
    let name = "cluster: graft-driver watches NVML health events of every GPU";
    let published = crate::cluster::workloads::published_devices(c)?
        .iter()
        .filter(|d| d.starts_with("gpu-") && !d.contains("-mig-"))
        .count();
    let start = Instant::now();
    loop {
        let log = c
            .kubectl(&[
                "-n",
                "graft-system",
                "logs",
                // GPU mode: the GPU nodes' DaemonSet (the node is labelled as a GPU node).
                "daemonset/graft-gpu",
                "-c",
                "graft-driver",
            ])
            .unwrap_or_default();
        let watching = log
            .lines()
            .rev()
            .find(|l| l.contains("watching NVML events"))
            .and_then(|l| l.split("gpus=").nth(1))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<usize>().ok());
        if let Some(n) = watching {
            r.check(
                name,
                n >= published && n > 0,
                format!("{n} GPUs registered, {published} whole GPUs published"),
            );
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(60) {
            r.check(
                name,
                false,
                "no `watching NVML events` line in graft-driver's log",
            );
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Two MPS shares of the GPU (NVML index `index`) in one namespace run the probe side by
/// side, each with its own limits in its environment.
fn mps(
    c: &Cluster,
    deploy: &mut Deploy<'_>,
    uuid: &str,
    index: u32,
    r: &mut Report,
) -> anyhow::Result<()> {
    deploy(&GpuValues {
        mps: index.to_string(),
        ..Default::default()
    })?;
    // Both start, then each runs the probe three times, so that they overlap.
    let commands = |pct: u32| {
        vec![
            ("limits", "env | grep CUDA_MPS | sort".to_string()),
            (
                "probe",
                format!("sleep 5; for i in 1 2 3; do {PROBE} || exit 1; done"),
            ),
            ("share", format!("echo compute {pct}")),
        ]
    };
    for (name, pct, mem) in [("share-a", 40, "20Gi"), ("share-b", 60, "20Gi")] {
        let cap = format!(r#"{{compute: "{pct}", memory: {mem}}}"#);
        c.apply(&pod_yaml(
            name,
            uuid,
            Some(&cap),
            &[("app", true, script(&commands(pct)))],
        ))?;
    }
    for (name, pct) in [("share-a", 40), ("share-b", 60)] {
        let mut runs = sections(c, name, &["app"]).into_iter();
        let (_, run) = runs.next().context("no app container")?;
        let ok = run.as_ref().is_ok_and(|s| {
            let limits = containers::section(s, "limits");
            let probe = containers::section(s, "probe");
            limits
                .output
                .contains(&format!("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={pct}"))
                && probe.rc == Some(0)
                && probe.output.contains("PROBE PASS")
        });
        r.check(
            &format!("cluster: MPS share of {pct} % runs CUDA with its limits"),
            ok,
            match &run {
                Ok(s) => containers::section(s, "limits")
                    .output
                    .trim()
                    .replace('\n', ", "),
                Err(e) => e.to_string(),
            },
        );
        r.containers.push((
            format!("Cluster pod `{name}` (MPS share, compute {pct} %)"),
            report::container_body(&run),
        ));
    }
    delete_pods(c)?;
    Ok(())
}

/// The NVML index of the GPU behind `dev`, when it is a full GPU.
pub fn gpu_index(dev: &Device) -> Option<u32> {
    if attr(dev, "type") != "gpu" {
        return None;
    }
    dev.int_attribute("index")
        .and_then(|i| u32::try_from(i).ok())
}

/// Fails unless the cluster stage's prerequisites hold (root, the testbed cluster script).
pub fn preflight() -> anyhow::Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("the cluster stage needs root (kubelet, containerd)");
    }
    Ok(())
}
