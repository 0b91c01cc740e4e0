//! A container without a GPU claim on a GPU node, run by NVIDIA's container toolkit (built
//! from source and configured as the GPU Operator configures it: [`super::toolkit`]): with
//! the chart's defaults graft-nri rewrites the device requests the toolkit honours
//! (docs/security.md, promise 14), so the toolkit adds nothing; with
//! `nvidia.unclaimedGpuRequests=keep` the same images get every GPU from the toolkit, which
//! shows the toolkit really was on the containers' path.

use anyhow::{ensure, Context};
use graft_integration::cluster::workloads::wait_log;
use graft_integration::cluster::Cluster;
use graft_integration::images::ImageRoot;

/// An image `reference` of busybox with `env` in its config, imported into the cluster.
fn image(dir: &std::path::Path, reference: &str, env: &[&str]) -> anyhow::Result<()> {
    let root = ImageRoot::busybox(&dir.join(reference.replace([':', '/'], "_")))?;
    root.write("etc/passwd", "root:x:0:0:root:/:/bin/sh\n")?
        .write("etc/group", "root:x:0:\n")?;
    let env: Vec<String> = env.iter().map(|e| format!("{e:?}")).collect();
    let config = format!(
        r#"{{"Env":["PATH=/bin",{}],"Cmd":["/bin/sh"]}}"#,
        env.join(",")
    );
    let tar = dir.join(format!("{}.tar", reference.replace([':', '/'], "_")));
    root.save_with(reference, &tar, &config)?;
    graft_integration::gpu_check::cluster::import_image(&tar)
}

const PRINT: &str = r#"echo "V=${NVIDIA_VISIBLE_DEVICES-unset} I=${NVIDIA_IMEX_CHANNELS-unset} C=${CUDA_VERSION-unset}"; ls /dev | grep -c nvidia; echo DONE; sleep 3600"#;

fn container(name: &str, image: &str, env: &str) -> String {
    format!(
        r#"    - name: {name}
      image: {image}
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", {PRINT:?}]
{env}"#
    )
}

/// Imports the test's images: one asking for every GPU, one legacy CUDA image.
pub fn images() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    image(
        dir.path(),
        "graft.test/cuda-all:1",
        &["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_IMEX_CHANNELS=0"],
    )?;
    image(
        dir.path(),
        "graft.test/cuda-legacy:1",
        &["CUDA_VERSION=9.0"],
    )
}

fn pod(containers: &[String]) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: unclaimed\nspec:\n  runtimeClassName: nvidia\n  containers:\n{}\n",
        containers.join("\n")
    )
}

/// The toolkit runtime's debug lines for a create that adds nothing and one that adds
/// every GPU (nvidia-container-toolkit `internal/modifier/cdi.go`).
const NOTHING: &str = "No devices requested; no modification required.";
const INJECTS: &str = "Injecting devices using CDI: [management.nvidia.com/gpu=all]";

/// How many times the toolkit's runtime has logged `msg` so far.
fn runtime_said(msg: &str) -> anyhow::Result<usize> {
    let log = super::toolkit::runtime_log()?;
    let want = format!("\"msg\":{msg:?}");
    match std::fs::read_to_string(&log) {
        Ok(s) => Ok(s.lines().filter(|l| l.contains(&want)).count()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e).with_context(|| format!("reading {}", log.display())),
    }
}

/// With the chart's defaults: each container's environment asks for nothing (`void`), and
/// the toolkit, which runs each of them, adds no device.
pub fn unclaimed_container_sees_no_gpu(c: &Cluster) -> anyhow::Result<()> {
    let spec_env = r#"      env:
        - {name: NVIDIA_VISIBLE_DEVICES, value: "0,1"}"#;
    let (nothing, injects) = (runtime_said(NOTHING)?, runtime_said(INJECTS)?);
    c.apply(&pod(&[
        container("image-all", "graft.test/cuda-all:1", ""),
        container("legacy", "graft.test/cuda-legacy:1", ""),
        container("spec", "graft.test/cuda-legacy:1", spec_env),
    ]))?;
    c.wait_phase("unclaimed", "Running")?;
    for (ctr, want) in [
        ("image-all", "V=void I= C=unset"),
        ("legacy", "V=void I=unset C=9.0"),
        ("spec", "V=void I=unset C=9.0"),
    ] {
        let log = wait_log(c, "unclaimed", ctr, "DONE")?;
        ensure!(log.contains(want), "{ctr}: {want:?} not in\n{log}");
        ensure!(
            log.contains("\n0\n"),
            "{ctr} sees NVIDIA device nodes:\n{log}"
        );
    }
    // The sandbox and the three containers, each created through the toolkit.
    let nothing = runtime_said(NOTHING)? - nothing;
    ensure!(
        nothing >= 4 && runtime_said(INJECTS)? == injects,
        "NVIDIA's container runtime did not run the pod's containers adding nothing \
         ({nothing} creates without devices)"
    );
    c.kubectl(&["delete", "pod", "unclaimed", "--wait=true"])?;
    Ok(())
}

/// With `nvidia.unclaimedGpuRequests=keep`: the toolkit gives the image asking for every GPU,
/// and the legacy CUDA image, every GPU of the node (its CDI spec's `all`), as it would
/// without graft. Fewer than the node's 8 GPUs would mean the toolkit was not asked.
pub fn the_toolkit_gives_them_gpus_when_kept(c: &Cluster) -> anyhow::Result<()> {
    let injects = runtime_said(INJECTS)?;
    c.apply(&pod(&[
        container("image-all", "graft.test/cuda-all:1", ""),
        container("legacy", "graft.test/cuda-legacy:1", ""),
    ]))?;
    c.wait_phase("unclaimed", "Running")?;
    for ctr in ["image-all", "legacy"] {
        let log = wait_log(c, "unclaimed", ctr, "DONE")?;
        let count: usize = log
            .lines()
            .find_map(|l| l.trim().parse().ok())
            .with_context(|| format!("{ctr}: no count of NVIDIA nodes in\n{log}"))?;
        ensure!(
            count >= 8,
            "{ctr}: the toolkit gave {count} NVIDIA nodes, not every GPU's:\n{log}"
        );
    }
    let injects = runtime_said(INJECTS)? - injects;
    ensure!(injects == 2, "the toolkit injected {injects} times, not 2");
    c.kubectl(&["delete", "pod", "unclaimed", "--wait=true"])?;
    Ok(())
}
