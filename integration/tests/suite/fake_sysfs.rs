//! The fakes VFIO passthrough is tested against, driven as graft drives them: graft's own
//! sysfs code (families/nvidia/src/setup/vfio/) on the fake kernel of
//! integration/src/fake_sysfs.rs, persistence mode through the fake NVML and the fake
//! nvidia-smi run chrooted into the driver root, and nvidia-smi refusing what the real one
//! refuses. Needs root (chroot, mknod).

use std::os::unix::fs::FileTypeExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{ensure, Context};
use graft_driver::discovery::nvidia::setup::Vfio;
use graft_integration::fake_gpu::{FakeNode, LIB_DIR};
use graft_integration::fake_sysfs::{self, bdf, FakeKernel, AUDIO_DRIVER, VFIO_GROUP_MAJOR};
use nvml_wrapper::Nvml;

/// The driver root's nvidia-smi, chrooted into it as graft-driver runs it.
fn smi(node: &FakeNode, args: &[&str]) -> anyhow::Result<Output> {
    smi_as(node, args, None)
}

/// As [`smi`], as user `uid` when given.
fn smi_as(node: &FakeNode, args: &[&str], uid: Option<u32>) -> anyhow::Result<Output> {
    let root = node.host.clone();
    let mut cmd = Command::new("/usr/bin/nvidia-smi");
    cmd.args(args);
    // SAFETY: chroot, chdir and setuid are async-signal-safe; nothing else runs before exec.
    unsafe {
        cmd.pre_exec(move || {
            std::os::unix::fs::chroot(&root)?;
            std::env::set_current_dir("/")?;
            if let Some(uid) = uid {
                nix::unistd::setuid(nix::unistd::Uid::from_raw(uid))?;
            }
            Ok(())
        });
    }
    cmd.output().context("running the fake nvidia-smi")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn vfio(node: &FakeNode, timeout: Duration) -> Vfio {
    Vfio {
        sys: node.sys.clone(),
        proc: node.proc.clone(),
        timeout,
    }
}

fn is_char(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.file_type().is_char_device())
}

#[test]
fn a_gpu_and_its_audio_function_go_to_vfio_pci_once_persistence_mode_is_off() -> anyhow::Result<()>
{
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root (chroot, mknod)");
        return Ok(());
    }
    let dir = tempfile::Builder::new().prefix("gfs").tempdir_in("/tmp")?;
    let node = FakeNode::create(dir.path())?;
    fake_sysfs::add_audio_functions(&node)?;
    fake_sysfs::share_group(&node, 0, 1)?;
    let _kernel = FakeKernel::start(&node)?;
    let lib = node.host.join(&LIB_DIR[1..]).join("libnvidia-ml.so.1");
    let nvml = Nvml::builder().lib_path(lib.as_os_str()).init()?;

    let (gpu, audio) = (bdf(2, 0), bdf(2, 1));
    let v = vfio(&node, Duration::from_millis(600));
    let peers: Vec<String> = v
        .group_peers(&gpu)?
        .into_iter()
        .map(|p| format!("{} {}", p.pci_bus_id, p.driver.unwrap_or_default()))
        .collect();
    ensure!(peers == [format!("{audio} {AUDIO_DRIVER}")], "{peers:?}");
    // GPUs 0 and 1 share a group behind a PCIe port, which stays out.
    let shared: Vec<String> = v
        .group_peers(&bdf(0, 0))?
        .into_iter()
        .map(|p| p.pci_bus_id)
        .collect();
    ensure!(shared == [bdf(0, 1), bdf(1, 0), bdf(1, 1)], "{shared:?}");

    // As nvidia-persistenced keeps it: the driver refuses the unbind lock.
    ensure!(nvml
        .device_by_pci_bus_id(gpu.as_str())?
        .is_in_persistent_mode()?);
    let e = v.rebind(&gpu, "vfio-pci").unwrap_err().to_string();
    ensure!(e.contains("still in use"), "{e}");
    ensure!(fake_sysfs::driver(&node, &gpu).as_deref() == Some("nvidia"));

    // Off through nvidia-smi, which NVML then reads; the lock is granted.
    let out = smi(&node, &["-i", &gpu, "-pm", "0"])?;
    ensure!(out.status.success(), "{}", stdout(&out));
    ensure!(
        stdout(&out).contains("Disabled persistence mode for GPU 00000000:3A:00.0."),
        "{}",
        stdout(&out)
    );
    ensure!(!nvml
        .device_by_pci_bus_id(gpu.as_str())?
        .is_in_persistent_mode()?);
    ensure!(fake_sysfs::persistence(&node)? == [true, true, false, true, true, true, true, true]);
    let v = vfio(&node, Duration::from_secs(5));
    v.rebind(&gpu, "vfio-pci")?;
    v.switch(&audio, Some("vfio-pci"))?;
    for f in [&gpu, &audio] {
        ensure!(
            fake_sysfs::driver(&node, f).as_deref() == Some("vfio-pci"),
            "{f}"
        );
    }
    let group = node.dev.join("vfio/42");
    ensure!(is_char(&group) && is_char(&node.dev.join("vfio/vfio")));
    let rdev = std::fs::metadata(&group).map(|m| std::os::unix::fs::MetadataExt::rdev(&m))?;
    ensure!(nix::sys::stat::major(rdev) == u64::from(VFIO_GROUP_MAJOR));

    // Back, and persistence on again through NVML.
    v.rebind(&gpu, "nvidia")?;
    v.switch(&audio, Some(AUDIO_DRIVER))?;
    ensure!(fake_sysfs::driver(&node, &audio).as_deref() == Some(AUDIO_DRIVER));
    ensure!(
        !group.exists(),
        "the group node outlived the group's binding"
    );
    nvml.device_by_pci_bus_id(gpu.as_str())?
        .set_persistent(true)?;
    ensure!(fake_sysfs::persistence(&node)? == [true; 8]);
    Ok(())
}

/// The fake nvidia-smi takes only what the real one documents and graft uses, failing on
/// the rest with the real tool's return codes (nvidia-smi(1), RETURN VALUE).
#[test]
fn nvidia_smi_refuses_what_it_does_not_know() -> anyhow::Result<()> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root (chroot)");
        return Ok(());
    }
    let dir = tempfile::Builder::new().prefix("gsm").tempdir_in("/tmp")?;
    let node = FakeNode::create(dir.path())?;
    let code = |args: &[&str]| -> anyhow::Result<(i32, String)> {
        let o = smi(&node, args)?;
        Ok((o.status.code().unwrap_or(-1), stdout(&o)))
    };
    for ok in [
        &["-i", "0000:18:00.0", "-c", "DEFAULT"][..],
        &[
            "compute-policy",
            "-i",
            "0000:18:00.0",
            "--set-timeslice",
            "3",
        ],
        &[
            "--id=GPU-6a1f0001-93c1-4d4e-8f7b-0c5e2a900001",
            "--persistence-mode=1",
        ],
    ] {
        let (c, out) = code(ok)?;
        ensure!(c == 0, "{ok:?}: {c} {out}");
    }
    for (bad, want, msg) in [
        (
            &["--frobnicate"][..],
            2,
            "Option --frobnicate is not recognized",
        ),
        (
            &["-i", "0", "-pm", "2"],
            2,
            "Invalid combination of input arguments",
        ),
        (&["-i", "0", "-pm"], 2, "Invalid combination"),
        (&["-pm", "0", "-c", "0"], 2, "Invalid combination"),
        (&[], 2, "Invalid combination"),
        (
            &["compute-policy", "--set-timeslice", "7"],
            2,
            "Invalid combination",
        ),
        (&["compute-policy", "-l"], 2, "Option -l is not recognized"),
        (
            &["-i", "0000:99:00.0", "-pm", "0"],
            6,
            "No devices were found",
        ),
        // The fake driver root has no /dev/nvidiactl: queries cannot reach the driver.
        (&["-L"], 9, "couldn't communicate with the NVIDIA driver"),
    ] {
        let (c, out) = code(bad)?;
        ensure!(c == want && out.contains(msg), "{bad:?}: {c} {out}");
    }
    // Settings need root.
    let o = smi_as(&node, &["-i", "0000:18:00.0", "-pm", "0"], Some(65534))?;
    let out = stdout(&o);
    ensure!(
        o.status.code() == Some(4) && out.contains("Insufficient Permissions"),
        "{out}"
    );
    ensure!(fake_sysfs::persistence(&node)? == [true; 8]);
    let log = node.smi_calls();
    ensure!(log.lines().count() == 12, "{log}");
    Ok(())
}
