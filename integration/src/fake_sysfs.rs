//! A fake kernel for PCI driver binds on a fake NVIDIA node ([`FakeNode`]), for tests of
//! VFIO passthrough where graft-driver writes the node's sysfs as it would the kernel's:
//!
//! - [`add_audio_functions`]: each GPU gets its HDMI audio function `<bus>:00.1` (NVIDIA,
//!   class 0x0403, driver snd_hda_intel) in its IOMMU group, as consumer and workstation
//!   boards have; [`share_group`] puts a second GPU (and its functions) and the PCIe port
//!   above the first one in the first one's group, as a switch without ACS does;
//! - [`FakeKernel::start`]: a thread that plays the kernel on the node's sysfs and procfs,
//!   as the unit tests' fake kernel in families/nvidia/src/setup/vfio/tests.rs does. It
//!   acts on the drivers' `bind` and `unbind` files, binds only as a function's
//!   `driver_override` allows, lets the nvidia driver unbind a GPU only once its
//!   `unbindLock` was granted, and grants that lock only while the GPU's persistence mode is
//!   off in the fake NVML's state ([`persistence`]): with it on, nvidia-persistenced would
//!   hold the GPU open. When vfio-pci binds a group's first function it makes the group's
//!   node `/dev/vfio/<group>` in the node's /dev ([`VFIO_GROUP_MAJOR`]), and removes it when
//!   the last one leaves.
//!
//! Kernel behaviour (Documentation/ABI/testing/sysfs-bus-pci: `bind`, `unbind`,
//! `driver_override`; Documentation/driver-api/vfio.rst: groups and their /dev/vfio nodes)
//! is modelled only as far as graft uses it.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::fake_gpu::{FakeNode, LIB_DIR, PCI_BUSES};

/// The major number the fake kernel gives VFIO group nodes (vfio's is dynamic).
pub const VFIO_GROUP_MAJOR: u32 = 511;
/// The driver of the GPUs' HDMI audio functions.
pub const AUDIO_DRIVER: &str = "snd_hda_intel";
const DRIVERS: [&str; 4] = ["nvidia", "vfio-pci", AUDIO_DRIVER, "pcieport"];

/// The sysfs address of GPU `i`'s function `f`.
pub fn bdf(i: usize, f: u32) -> String {
    format!("0000:{:02x}:00.{f}", PCI_BUSES[i])
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("{}", path.display()))
}

fn device_dir(node: &FakeNode, bdf: &str) -> PathBuf {
    node.sys.join("bus/pci/devices").join(bdf)
}

fn link_name(p: &Path) -> Option<String> {
    Some(
        std::fs::read_link(p)
            .ok()?
            .file_name()?
            .to_str()?
            .to_string(),
    )
}

/// The driver `bdf` is bound to now.
pub fn driver(node: &FakeNode, bdf: &str) -> Option<String> {
    link_name(&device_dir(node, bdf).join("driver"))
}

fn group_of(node: &FakeNode, bdf: &str) -> Option<String> {
    link_name(&device_dir(node, bdf).join("iommu_group"))
}

/// Puts `bdf` (whose directory exists) in IOMMU group `group`, out of any other.
fn join_group(node: &FakeNode, bdf: &str, group: &str) -> anyhow::Result<()> {
    let dev = std::fs::canonicalize(device_dir(node, bdf))?;
    if let Some(old) = group_of(node, bdf) {
        let old_link = node
            .sys
            .join("kernel/iommu_groups")
            .join(old)
            .join("devices");
        let _ = std::fs::remove_file(old_link.join(bdf));
        std::fs::remove_file(dev.join("iommu_group"))?;
    }
    let g = node.sys.join("kernel/iommu_groups").join(group);
    std::fs::create_dir_all(g.join("devices"))?;
    symlink(&g, dev.join("iommu_group"))?;
    symlink(&dev, g.join("devices").join(bdf))?;
    Ok(())
}

/// A function at `dir` (made if missing), listed in /sys/bus/pci/devices, bound to `drv`.
fn add_function(
    node: &FakeNode,
    dir: &Path,
    bdf: &str,
    vendor: &str,
    class: &str,
    drv: &str,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    write(&dir.join("vendor"), &format!("{vendor}\n"))?;
    write(&dir.join("class"), &format!("{class}\n"))?;
    let drivers = node.sys.join("bus/pci/drivers");
    std::fs::create_dir_all(drivers.join(drv))?;
    let _ = std::fs::remove_file(dir.join("driver"));
    symlink(drivers.join(drv), dir.join("driver"))?;
    let listed = node.sys.join("bus/pci/devices").join(bdf);
    if std::fs::symlink_metadata(&listed).is_err() {
        symlink(dir, listed)?;
    }
    Ok(())
}

/// Each GPU's HDMI audio function, `<bus>:00.1`, in the GPU's IOMMU group.
pub fn add_audio_functions(node: &FakeNode) -> anyhow::Result<()> {
    for i in 0..PCI_BUSES.len() {
        let gpu = std::fs::canonicalize(device_dir(node, &bdf(i, 0)))?;
        let parent = gpu.parent().context("GPU directory")?;
        let audio = bdf(i, 1);
        add_function(
            node,
            &parent.join(&audio),
            &audio,
            "0x10de",
            "0x040300",
            AUDIO_DRIVER,
        )?;
        let group = group_of(node, &bdf(i, 0)).context("GPU without a group")?;
        join_group(node, &audio, &group)?;
    }
    Ok(())
}

/// GPU `b` with its audio function, and the PCIe port above GPU `a`, join GPU `a`'s
/// group (call after [`add_audio_functions`]).
pub fn share_group(node: &FakeNode, a: usize, b: usize) -> anyhow::Result<()> {
    let group = group_of(node, &bdf(a, 0)).context("GPU without a group")?;
    for f in [bdf(b, 0), bdf(b, 1)] {
        join_group(node, &f, &group)?;
    }
    let gpu = std::fs::canonicalize(device_dir(node, &bdf(a, 0)))?;
    let port = gpu.parent().context("GPU directory")?;
    let name = port
        .file_name()
        .and_then(|n| n.to_str())
        .context("port")?
        .to_string();
    add_function(node, port, &name, "0x8086", "0x060400", "pcieport")?;
    join_group(node, &name, &group)
}

/// The fake NVML's persistence state (integration/fake-nvml/src/persistence.rs), beside
/// `libnvidia-ml.so.1` in the driver root.
pub fn persistence_file(node: &FakeNode) -> PathBuf {
    node.host.join(&LIB_DIR[1..]).join("fake-nvml-persistence")
}

/// Persistence mode by NVML index: on unless the state says off.
pub fn persistence(node: &FakeNode) -> anyhow::Result<[bool; 8]> {
    let path = persistence_file(node);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("{}", path.display())),
    };
    let mut modes = [true; 8];
    for line in text.lines() {
        let words: Vec<&str> = line
            .split('#')
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        if let [i, mode] = words.as_slice() {
            let i: usize = i.parse().with_context(|| format!("{line:?}"))?;
            *modes.get_mut(i).context("GPU index")? = *mode == "enabled";
        }
    }
    Ok(modes)
}

/// Writes the persistence state with every GPU on, so that the file exists (a test
/// bind-mounts it writable into graft-driver's view of the driver root).
pub fn init_persistence(node: &FakeNode) -> anyhow::Result<()> {
    let mut text = String::from("# fake NVML persistence mode\n");
    for i in 0..PCI_BUSES.len() {
        text += &format!("{i} enabled\n");
    }
    write(&persistence_file(node), &text)
}

fn mknod(path: &Path, major: u32, minor: u32) -> anyhow::Result<()> {
    if std::fs::symlink_metadata(path).is_ok() {
        return Ok(());
    }
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    nix::sys::stat::mknod(
        path,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(major.into(), minor.into()),
    )
    .with_context(|| format!("mknod {} (needs root)", path.display()))
}

/// The kernel thread; stops and is joined when dropped.
pub struct FakeKernel {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeKernel {
    /// Makes every driver's `bind` and `unbind`, each function's `driver_override`, and
    /// `/dev/vfio/vfio` (10:196, as the vfio module's misc device), then starts playing the
    /// kernel.
    pub fn start(node: &FakeNode) -> anyhow::Result<FakeKernel> {
        let drivers = node.sys.join("bus/pci/drivers");
        for d in DRIVERS {
            std::fs::create_dir_all(drivers.join(d))?;
            write(&drivers.join(d).join("bind"), "")?;
            write(&drivers.join(d).join("unbind"), "")?;
        }
        for e in std::fs::read_dir(node.sys.join("bus/pci/devices"))?.flatten() {
            write(&e.path().join("driver_override"), "(null)\n")?;
        }
        mknod(&node.dev.join("vfio/vfio"), 10, 196)?;
        // The state the kernel keeps (unbind locks refused under persistence mode) holds
        // from the start, not from the thread's first turn: a caller racing that turn
        // would be granted a lock the driver refuses.
        pass(node)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let n = node.clone();
        let thread = std::thread::spawn(move || {
            let mut last = String::new();
            while !flag.load(Ordering::Relaxed) {
                if let Err(e) = pass(&n) {
                    // Once per distinct problem: the thread runs every few milliseconds.
                    let e = format!("{e:#}");
                    if e != last {
                        eprintln!("fake kernel: {e}");
                        last = e;
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Ok(FakeKernel {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for FakeKernel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn unbind_lock(node: &FakeNode, bdf: &str) -> PathBuf {
    node.proc
        .join("driver/nvidia/gpus")
        .join(bdf)
        .join("unbindLock")
}

/// Whether the nvidia driver granted `bdf`'s unbind lock (it reads back 1).
fn lock_granted(node: &FakeNode, bdf: &str) -> bool {
    std::fs::read_to_string(unbind_lock(node, bdf)).is_ok_and(|s| s.trim() == "1")
}

/// One look at everything the kernel reacts to.
fn pass(node: &FakeNode) -> anyhow::Result<()> {
    // A GPU on nvidia with persistence on: its lock is refused (what is written to it is
    // not read back); otherwise it is a plain file that keeps what graft writes.
    let modes = persistence(node).unwrap_or([true; 8]);
    for (i, on) in modes.iter().enumerate() {
        let gpu = bdf(i, 0);
        let lock = unbind_lock(node, &gpu);
        let refusing = std::fs::symlink_metadata(&lock).is_ok_and(|m| m.file_type().is_symlink());
        let refuse = *on && driver(node, &gpu).as_deref() == Some("nvidia");
        if refuse && !refusing {
            let tmp = lock.with_extension("tmp");
            let _ = std::fs::remove_file(&tmp);
            symlink("/dev/null", &tmp)?;
            std::fs::rename(&tmp, &lock)?;
        } else if !refuse && refusing {
            let tmp = lock.with_extension("tmp");
            write(&tmp, "0\n")?;
            std::fs::rename(&tmp, &lock)?;
        }
    }
    for d in DRIVERS {
        let dir = node.sys.join("bus/pci/drivers").join(d);
        let unbind = std::fs::read_to_string(dir.join("unbind")).unwrap_or_default();
        let f = unbind.trim();
        if !f.is_empty() {
            write(&dir.join("unbind"), "")?;
            let held = d == "nvidia" && !lock_granted(node, f);
            if driver(node, f).as_deref() == Some(d) && !held {
                std::fs::remove_file(device_dir(node, f).join("driver"))?;
                if d == "vfio-pci" {
                    group_node(node, f)?;
                }
            }
        }
        let bind = std::fs::read_to_string(dir.join("bind")).unwrap_or_default();
        let f = bind.trim();
        if !f.is_empty() {
            write(&dir.join("bind"), "")?;
            let dev = device_dir(node, f);
            let over = std::fs::read_to_string(dev.join("driver_override")).unwrap_or_default();
            let allowed = matches!(over.trim(), "" | "(null)") || over.trim() == d;
            if allowed && driver(node, f).is_none() {
                symlink(&dir, dev.join("driver"))?;
                if d == "nvidia" && std::fs::symlink_metadata(unbind_lock(node, f)).is_ok() {
                    write(&unbind_lock(node, f), "0\n")?;
                }
                if d == "vfio-pci" {
                    group_node(node, f)?;
                }
            }
        }
    }
    Ok(())
}

/// `/dev/vfio/<group>` of `bdf`'s group while any of its functions is on vfio-pci.
fn group_node(node: &FakeNode, bdf: &str) -> anyhow::Result<()> {
    let group = group_of(node, bdf).context("no IOMMU group")?;
    let members = node
        .sys
        .join("kernel/iommu_groups")
        .join(&group)
        .join("devices");
    let any = std::fs::read_dir(&members)?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .any(|m| driver(node, &m).as_deref() == Some("vfio-pci"));
    let path = node.dev.join("vfio").join(&group);
    if any {
        mknod(
            &path,
            VFIO_GROUP_MAJOR,
            group.parse().context("group number")?,
        )
    } else {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}
