//! The render family through the chart as shipped (`backends.render`, the
//! `render.graft.dev` DeviceClass), on the GPU bed because only there does graft-driver
//! read a sysfs the test can write (`GRAFT_SYSFS_ROOT`, the fake node's).
//!
//! What stands in for hardware this machine lacks, and where each part's shape comes from:
//! - sysfs: `class/drm/renderD128` links to the GPU's `drm/renderD128`, whose `dev` holds
//!   `226:128` and whose `device` links to the PCI function with `vendor`, `device` and a
//!   `driver` link (the kernel's sysfs ABI, Documentation/ABI/testing/sysfs-class-drm and
//!   sysfs-bus-pci); `card0`, a modesetting node, beside it.
//! - /dev: a real character node `/dev/dri/renderD128` (226:128, DRM's major) on the host,
//!   made for the test and removed after it. No DRM driver is loaded here, so opening it
//!   fails as it would with the GPU's driver unloaded; the test looks at the node only.

use std::os::unix::fs::symlink;
use std::path::Path;

use anyhow::{ensure, Context};
use graft_integration::cluster::gpu::GpuValues;
use graft_integration::cluster::workloads::{device_pod, wait_log, wait_unprepared};
use graft_integration::cluster::Cluster;
use graft_integration::fake_gpu::FakeNode;
use nix::sys::stat::{makedev, mknod, Mode, SFlag};

const NODE: &str = "/dev/dri/renderD128";
const GPU: &str = "devices/pci0000:00/0000:00:02.0";

/// The chart with the render family on beside the GPU mode's.
pub fn values() -> GpuValues {
    GpuValues {
        helm: vec!["--set".into(), "backends.render=true".into()],
        ..Default::default()
    }
}

/// Removes the host's render node (and /dev/dri, if the test made it) when dropped.
pub struct HostNode {
    made_dir: bool,
}

impl Drop for HostNode {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(NODE);
        if self.made_dir {
            let _ = std::fs::remove_dir("/dev/dri");
        }
    }
}

/// The fake GPU's render and card entries in the fake node's sysfs, and the host's node.
pub fn before_start(node: &FakeNode) -> anyhow::Result<HostNode> {
    let gpu = node.sys.join(GPU);
    std::fs::create_dir_all(node.sys.join("class/drm"))?;
    std::fs::create_dir_all(node.sys.join("bus/pci/drivers/i915"))?;
    std::fs::create_dir_all(&gpu)?;
    std::fs::write(gpu.join("vendor"), "0x8086\n")?;
    std::fs::write(gpu.join("device"), "0x56a0\n")?;
    symlink("../../../bus/pci/drivers/i915", gpu.join("driver"))?;
    for (name, numbers) in [("renderD128", "226:128"), ("card0", "226:0")] {
        let own = gpu.join("drm").join(name);
        std::fs::create_dir_all(&own)?;
        std::fs::write(own.join("dev"), format!("{numbers}\n"))?;
        symlink("../../../0000:00:02.0", own.join("device"))?;
        symlink(
            format!("../../{GPU}/drm/{name}"),
            node.sys.join("class/drm").join(name),
        )?;
    }
    let made_dir = !Path::new("/dev/dri").exists();
    std::fs::create_dir_all("/dev/dri")?;
    let guard = HostNode { made_dir };
    match mknod(
        NODE,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(226, 128),
    ) {
        Ok(()) => {}
        Err(nix::errno::Errno::EEXIST) => {}
        Err(e) => return Err(e).context(format!("mknod {NODE}")),
    }
    Ok(guard)
}

/// A pod's container asks `render.graft.dev` and gets the node; its siblings do not; the
/// slice says what the GPU behind it is.
pub fn render(c: &Cluster) -> anyhow::Result<()> {
    let slices = c.kubectl(&["get", "resourceslices", "-o", "json"])?;
    for want in ["render-0000-00-02-0", "\"i915\"", "\"0x8086\"", NODE] {
        ensure!(slices.contains(want), "{want} not in the ResourceSlices");
    }
    ensure!(
        !slices.contains("/dev/dri/card0"),
        "a modesetting node was published"
    );
    c.apply(&device_pod("render", "render.graft.dev", NODE))?;
    c.wait_phase("render", "Running")?;
    let log = wait_log(c, "render", "app", "renderD128")?;
    ensure!(
        log.contains(&format!("{NODE} e2:80 character special file")),
        "the render node is not in the container as 226:128:\n{log}"
    );
    let other = wait_log(c, "render", "other", "No such file")?;
    ensure!(!other.contains(&format!("{NODE}\n")), "{other}");
    c.kubectl(&["delete", "pod", "render", "--wait=true"])?;
    wait_unprepared(c)
}
