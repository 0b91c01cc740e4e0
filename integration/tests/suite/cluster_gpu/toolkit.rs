//! NVIDIA's container toolkit on the testbed's node, built from its Go source
//! (integration/testbed/build-nvidia-toolkit.sh) and configured as the GPU Operator's
//! toolkit installer configures a containerd node with CDI on (the operator's default since
//! v25.10; gpu-operator `controllers/object_controls.go`, `transformToolkitCtrForCDI`, and
//! nvidia-container-toolkit `cmd/nvidia-ctk-installer`):
//!
//! - a containerd runtime handler `nvidia` whose binary is the toolkit's runtime, run through
//!   a wrapper that points it at its own config file (`NVIDIA_CTK_CONFIG_FILE_PATH`), as the
//!   installer's wrapper does. The installer's wrapper also skips the toolkit when
//!   `/proc/modules` lists no `nvidia` module; the fake node has no kernel module, so this
//!   wrapper leaves that check out. The handler is in the testbed's containerd config
//!   (cluster.sh); with CDI on the operator leaves `runc` the default runtime, and pods
//!   reach the toolkit through the RuntimeClass `nvidia`, made here;
//! - the runtime's config: `mode = "cdi"`, `default-kind = "management.nvidia.com/gpu"`
//!   (the operator's `NVIDIA_CONTAINER_RUNTIME_MODE` and
//!   `NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND`), so `NVIDIA_VISIBLE_DEVICES=all`
//!   asks for `management.nvidia.com/gpu=all`;
//! - that CDI spec, made by the toolkit's own `nvidia-ctk cdi generate --mode=management`
//!   from the fake driver root, with device nodes of the fake node's majors and minors in a
//!   /dev of its own (the toolkit stats each node's host path; graft's fake /dev stays as it
//!   is). The spec and the config live in the testbed's directory, not the host's /etc.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use graft_integration::cluster::gpu::FAKE_DIR;
use graft_integration::cluster::{run, Cluster};
use graft_integration::fake_gpu::{MINORS, UVM_MAJOR};

/// The toolkit's directory on the host: the containerd handler `nvidia` (cluster.sh) runs
/// `nvidia-container-runtime` here.
fn dir() -> anyhow::Result<PathBuf> {
    Ok(Path::new(FAKE_DIR)
        .parent()
        .context("the fake node's directory has a parent")?
        .join("nvidia-toolkit"))
}

/// Where the toolkit's runtime logs each call it handles.
pub fn runtime_log() -> anyhow::Result<PathBuf> {
    Ok(dir()?.join("nvidia-container-runtime.log"))
}

/// Builds the toolkit (cached), writes its CDI spec, config and wrapper, and makes the
/// RuntimeClass `nvidia`. Run after the fake node is made (the spec names its driver root).
pub fn install(c: &Cluster) -> anyhow::Result<()> {
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = run(Command::new("bash").arg(top.join("testbed/build-nvidia-toolkit.sh")))
        .context("building NVIDIA's container toolkit from source")?;
    let bin = PathBuf::from(bin.trim());
    let dir = dir()?;
    let _ = std::fs::remove_dir_all(&dir);
    let dev = dir.join("dev-root/dev");
    std::fs::create_dir_all(&dev)?;
    let mut nodes: Vec<(String, u32, u32)> = MINORS
        .iter()
        .map(|m| (format!("nvidia{m}"), 195, *m))
        .collect();
    nodes.push(("nvidiactl".into(), 195, 255));
    nodes.push(("nvidia-uvm".into(), UVM_MAJOR, 0));
    nodes.push(("nvidia-uvm-tools".into(), UVM_MAJOR, 1));
    for (name, major, minor) in nodes {
        run(Command::new("mknod").arg(dev.join(name)).args([
            "c",
            &major.to_string(),
            &minor.to_string(),
        ]))?;
    }
    let cdi = dir.join("cdi");
    std::fs::create_dir_all(&cdi)?;
    run(Command::new(bin.join("nvidia-ctk"))
        .args([
            "--quiet",
            "cdi",
            "generate",
            "--mode=management",
            "--vendor=management.nvidia.com",
            "--class=gpu",
        ])
        .arg(format!("--driver-root={FAKE_DIR}/host"))
        .arg(format!("--dev-root={}", dir.join("dev-root").display()))
        .arg(format!(
            "--nvidia-cdi-hook-path={}",
            bin.join("nvidia-cdi-hook").display()
        ))
        .arg(format!(
            "--output={}",
            cdi.join("management.nvidia.com-gpu.yaml").display()
        )))
    .context("nvidia-ctk cdi generate")?;
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            r#"accept-nvidia-visible-devices-envvar-when-unprivileged = true
accept-nvidia-visible-devices-as-volume-mounts = false

[nvidia-container-runtime]
debug = "{log}"
log-level = "debug"
mode = "cdi"
runtimes = ["runc"]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "management.nvidia.com/gpu"
spec-dirs = ["{cdi}"]

[nvidia-container-cli]
root = "{FAKE_DIR}/host"

[nvidia-ctk]
path = "{ctk}"
"#,
            log = runtime_log()?.display(),
            cdi = cdi.display(),
            ctk = bin.join("nvidia-ctk").display(),
        ),
    )?;
    let wrapper = dir.join("nvidia-container-runtime");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nNVIDIA_CTK_CONFIG_FILE_PATH={} exec {} \"$@\"\n",
            config.display(),
            bin.join("nvidia-container-runtime").display()
        ),
    )?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))?;
    c.apply("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: nvidia\nhandler: nvidia\n")
}
