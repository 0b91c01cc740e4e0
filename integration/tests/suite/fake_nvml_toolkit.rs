//! NVIDIA's container toolkit against the fake node: `nvidia-ctk cdi generate` (v1.20.2,
//! built from its Go source by integration/testbed/build-nvidia-toolkit.sh) loads the fake
//! libnvidia-ml from the driver root through go-nvml, which binds some calls unversioned,
//! and walks every GPU and MIG device as on a real node. The toolkit reads MIG capability
//! minors from the host's `/proc/driver/nvidia-caps`, not the driver root, so it runs in a
//! mount namespace of its own with the fake node's `/proc/driver` there. Needs root.

use std::path::Path;
use std::process::Command;

use anyhow::{ensure, Context};
use graft_integration::cluster::run;
use graft_integration::fake_gpu::{FakeNode, MINORS};

#[test]
fn nvidia_ctk_generates_a_spec_from_the_fake_node() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let node = FakeNode::create(dir.path())?;
    let top = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = run(Command::new("bash").arg(top.join("testbed/build-nvidia-toolkit.sh")))?;
    let ctk = Path::new(bin.trim()).join("nvidia-ctk");
    // The GPUs' nodes, at the driver root's /dev, as the driver makes them.
    let dev = node.host.join("dev");
    std::fs::create_dir_all(&dev)?;
    for m in MINORS
        .iter()
        .map(|m| (format!("nvidia{m}"), *m))
        .chain([("nvidiactl".into(), 255)])
    {
        run(Command::new("mknod")
            .arg(dev.join(&m.0))
            .args(["c", "195", &m.1.to_string()]))?;
    }
    let spec = dir.path().join("nvidia.yaml");
    let script = format!(
        "mount --bind {proc}/driver /proc/driver && exec {ctk} --quiet cdi generate \
         --mode=nvml --driver-root={root} --output={spec}",
        proc = node.proc.display(),
        ctk = ctk.display(),
        root = node.host.display(),
        spec = spec.display(),
    );
    run(Command::new("unshare").args(["--mount", "--propagation", "private", "sh", "-c", &script]))
        .context("nvidia-ctk cdi generate on the fake node")?;
    let spec = std::fs::read_to_string(&spec)?;
    // Six whole GPUs by index, the preset MIG devices of GPUs 6 and 7, every UUID, `all`.
    for name in [
        "\"0\"", "\"5\"", "\"6:0\"", "\"7:0\"", "GPU-", "MIG-", "all",
    ] {
        ensure!(
            spec.contains(&format!("- name: {name}")),
            "no device {name} in the spec:\n{spec}"
        );
    }
    ensure!(
        spec.contains(&format!("hostPath: {}/nvidia2", dev.display())),
        "GPU 0's node (minor 2) is not in the spec:\n{spec}"
    );
    Ok(())
}
