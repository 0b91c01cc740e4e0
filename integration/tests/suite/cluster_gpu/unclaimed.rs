//! A container without a GPU claim on a GPU node, with the chart's defaults: graft-nri
//! rewrites the device requests NVIDIA's container toolkit would honour (docs/security.md,
//! promise 14). The toolkit is not on the testbed's node, so this checks what it would
//! read: the container's environment as created.

use anyhow::ensure;
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

pub fn unclaimed_container_sees_no_gpu(c: &Cluster) -> anyhow::Result<()> {
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
    )?;
    let spec_env = r#"      env:
        - {name: NVIDIA_VISIBLE_DEVICES, value: "0,1"}"#;
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: unclaimed\nspec:\n  containers:\n{}\n{}\n{}\n",
        container("image-all", "graft.test/cuda-all:1", ""),
        container("legacy", "graft.test/cuda-legacy:1", ""),
        container("spec", "graft.test/cuda-legacy:1", spec_env),
    );
    c.apply(&pod)?;
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
    c.kubectl(&["delete", "pod", "unclaimed", "--wait=true"])?;
    Ok(())
}
