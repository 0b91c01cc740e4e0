//! Helpers of the MPS cluster tests (cluster_gpu/mps.rs): the probe image and pods with MPS
//! shares, namespaced waits, and what graft-mps leaves on the host.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::ensure;
use graft_integration::cluster::{wait_until, workloads, Cluster, WAIT};
use graft_integration::fake_gpu::FakeNode;
use graft_integration::gpu_check::{compile_probe, image};

/// The GPU shared through MPS, as --nvidia-mps takes it (gpu-6).
pub const MPS_GPU: &str = "4";
/// The tenancies' /dev/shm size in these tests: small, to be filled.
pub const SHM_SIZE: &str = "16Mi";
const MPS_STATE: &str = "/var/lib/graft/mps";
/// A claim selector for devices shared through MPS.
pub const CEL: &str = r#"device.attributes["graft.dev"].?sharing.orValue("") == "mps""#;

/// Builds the GPU-check image for the fake node and imports it into the cluster's
/// containerd (once per test; importing again is harmless).
pub fn import_probe_image(node: &FakeNode) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let probe = dir.path().join("graft-cuda-probe");
    compile_probe(&probe)?;
    let built = image::build(&dir.path().join("image"), &probe, &node.host)?;
    ensure!(built.unresolved.is_empty(), "{:?}", built.unresolved);
    graft_integration::gpu_check::cluster::import_image(&built.tar)?;
    Ok(())
}

/// A claim template and a pod of `ns` whose container (the probe's image, as `uid` when
/// given) runs `command` with a share of `compute` % and `memory`.
pub fn share_pod(
    ns: &str,
    name: &str,
    compute: u32,
    memory: &str,
    uid: Option<u32>,
    command: &str,
) -> String {
    let capacity = format!(r#"{{compute: "{compute}", memory: {memory}}}"#);
    mps_pod(ns, name, Some(&capacity), uid, command)
}

/// As [`share_pod`], the claim asking `capacity` (`None`: nothing, so the whole GPU).
pub fn mps_pod(
    ns: &str,
    name: &str,
    capacity: Option<&str>,
    uid: Option<u32>,
    command: &str,
) -> String {
    let security = uid
        .map(|u| format!("\n  securityContext: {{runAsUser: {u}, runAsGroup: {u}}}"))
        .unwrap_or_default();
    let claim = workloads::claim_template_in(ns, name, "gpu.graft.dev", Some(CEL), capacity);
    claim + &probe_pod(ns, name, &security, command)
}

/// A pod `name` of `ns` (with `security` added to its spec) whose container, in the probe's
/// image, runs `command` with the claim of the template `name`.
pub fn probe_pod(ns: &str, name: &str, security: &str, command: &str) -> String {
    let command = serde_json::to_string(command).unwrap_or_default();
    format!(
        r#"---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {ns}}}
spec:
  terminationGracePeriodSeconds: 1{security}
  resourceClaims: [{{name: gpu, resourceClaimTemplateName: {name}}}]
  containers:
  - name: app
    image: {}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", {command}]
    resources: {{claims: [{{name: gpu}}]}}
"#,
        image::IMAGE
    )
}

/// Waits until pod `name` of `ns` is unschedulable, checks it stays Pending and unbound for
/// 5 s more; the scheduler's reason.
pub fn stays_unschedulable(c: &Cluster, ns: &str, name: &str) -> anyhow::Result<String> {
    let reason = || {
        c.kubectl(&[
            "-n",
            ns,
            "get",
            "pod",
            name,
            "-o",
            "jsonpath={.spec.nodeName}|{.status.conditions[?(@.type==\"PodScheduled\")].reason}|\
             {.status.conditions[?(@.type==\"PodScheduled\")].message}",
        ])
    };
    wait_until(&format!("{ns}/{name} was not found unschedulable"), || {
        Ok(reason()?.starts_with("|Unschedulable|"))
    })?;
    std::thread::sleep(Duration::from_secs(5));
    let why = reason()?;
    ensure!(why.starts_with("|Unschedulable|"), "{why}");
    ensure!(workloads::phase(c, ns, name) == "Pending");
    Ok(why)
}

pub fn exec(c: &Cluster, ns: &str, pod: &str, script: &str) -> anyhow::Result<String> {
    c.kubectl(&[
        "-n",
        ns,
        "exec",
        pod,
        "-c",
        "app",
        "--",
        "sh",
        "-c",
        &format!("( {script} ) 2>&1"),
    ])
}

/// The one GPU directory graft-mps keeps (the MPS GPU's).
pub fn gpu_dir() -> anyhow::Result<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(MPS_STATE)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    ensure!(dirs.len() == 1, "GPU directories in {MPS_STATE}: {dirs:?}");
    Ok(dirs.remove(0))
}

/// The tenancy directories (`t-<generation>`) of the GPU.
pub fn tenancies(gpu: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(gpu)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("t-"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The only tenancy of the GPU.
pub fn tenancy(gpu: &Path) -> anyhow::Result<PathBuf> {
    let t = tenancies(gpu);
    ensure!(t.len() == 1, "tenancies of {}: {t:?}", gpu.display());
    Ok(t[0].clone())
}

pub fn mounts_below(dir: &str) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|m| m.starts_with(dir))
        .collect()
}

/// Waits until no claim is left and graft-mps has ended every tenancy: no directory, no
/// mount, a stopped status.
pub fn wait_all_gone(c: &Cluster) -> anyhow::Result<()> {
    workloads::wait_unprepared(c)?;
    let start = Instant::now();
    loop {
        let gpu = gpu_dir()?;
        let status = std::fs::read_to_string(gpu.join("status.json")).unwrap_or_default();
        let left = tenancies(&gpu);
        let mounts = mounts_below(MPS_STATE);
        if left.is_empty() && mounts.is_empty() && status.contains("\"stopped\"") {
            return Ok(());
        }
        ensure!(
            start.elapsed() < WAIT,
            "after the last share: tenancies {left:?}, mounts {mounts:?}, status {status}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// graft-mps's pod is up (it is not part of graft's rollout; OnDelete has no rollout
/// status).
pub fn graft_mps_ready(c: &Cluster) -> anyhow::Result<()> {
    wait_until("graft-mps never became ready", || {
        Ok(graft_mps_pods(c, "{.items[*].status.containerStatuses[*].ready}")?.trim() == "true")
    })?;
    Ok(())
}

/// `jsonpath` of graft-mps's pods.
fn graft_mps_pods(c: &Cluster, jsonpath: &str) -> anyhow::Result<String> {
    c.kubectl(&[
        "-n",
        "graft-system",
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=graft-mps",
        "-o",
        &format!("jsonpath={jsonpath}"),
    ])
}

/// `name=restarts` of every container in graft-system, and graft-mps's pod UID.
pub fn graft_state(c: &Cluster) -> anyhow::Result<(String, String)> {
    let uid = graft_mps_pods(c, "{.items[*].metadata.uid}")?;
    Ok((workloads::graft_restarts(c)?, uid))
}

pub use graft_integration::cluster::workloads::pod_events;

pub fn control_log(t: &Path) -> String {
    FakeNode::mps_log(&t.join("log"))
}

pub fn server_log(t: &Path) -> String {
    FakeNode::mps_server_log(&t.join("log"))
}
