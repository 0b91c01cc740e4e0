//! A fake NVIDIA node on disk for GPU-less tests: a driver root holding the fake
//! `libnvidia-ml.so.1` (integration/fake-nvml), the fake `libcuda.so.1`
//! (integration/fake-cuda), dummy versioned driver libraries, static fakes of nvidia-smi,
//! nvidia-cuda-mps-control, nvidia-cuda-mps-server, nvidia-imex and nvidia-imex-ctl
//! (those two in [`imex`], with the fabric state and IMEX channel nodes), firmware, the persistenced socket
//! path and the `tmp` and `proc` mount points a driver root has; a /proc with
//! the NVIDIA character majors, `mig-minors` and one capability file; a /sys with the
//! GPUs' PCI functions, NUMA nodes and PCIe roots. Shaped like the fake library's 8 x H100.

use std::io::{Read, Write};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};

mod config;
mod imex;
mod links;
pub use imex::{build_fake_imex, build_fake_imex_ctl, FabricState, ImexConfig};

/// The driver version the fake libraries report.
pub const DRIVER_VERSION: &str = "580.95.05";
/// Where the fake driver's libraries are, below the driver root.
pub const LIB_DIR: &str = "/usr/lib/x86_64-linux-gnu";
/// NVML index to minor number, as the fake library reports them.
pub const MINORS: [u32; 8] = [2, 3, 0, 1, 6, 7, 4, 5];
/// PCI bus of each GPU, by NVML index, as the fake library reports them.
pub const PCI_BUSES: [u32; 8] = [0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb];
/// The character major of `nvidia-uvm` in the fake /proc.
pub const UVM_MAJOR: u32 = 510;
/// The character major of `nvidia-caps` in the fake /proc.
pub const CAPS_MAJOR: u32 = 235;
/// The character major of `nvidia-caps-imex-channels` in the fake /proc.
pub const IMEX_MAJOR: u32 = 234;

/// A GPU instance in the fake NVML's MIG state file, with the ids of its compute
/// instances (format in integration/fake-nvml/src/mig/state.rs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigInstance {
    /// NVML index of the GPU.
    pub gpu: usize,
    /// GPU instance id.
    pub gi: u32,
    /// GPU instance profile (an `NVML_GPU_INSTANCE_PROFILE_*` index).
    pub profile: u32,
    /// Placement: first memory slice, and how many.
    pub start: u32,
    /// How many memory slices.
    pub size: u32,
    /// Compute instance ids, ascending.
    pub cis: Vec<u32>,
}

/// A fake NVIDIA node on disk; see the module's note.
#[derive(Clone)]
pub struct FakeNode {
    /// Stands in for the host's `/` (driver root `/` inside it).
    pub host: PathBuf,
    /// Stands in for the host's /proc.
    pub proc: PathBuf,
    /// Stands in for the host's /sys.
    pub sys: PathBuf,
    /// Stands in for the host's /dev.
    pub dev: PathBuf,
}

/// Builds the fake libraries (graft-fake-nvml, graft-fake-cuda) and returns the path of
/// `name` among them. A no-op rebuild takes a moment, so calling it per node is fine.
fn fake_lib(name: &str) -> anyhow::Result<PathBuf> {
    let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(&top)
        // test-all.sh sets it for libtest's per-test times; a build under it is another build.
        .env_remove("RUSTC_BOOTSTRAP")
        .args([
            "build",
            "-q",
            "-p",
            "graft-fake-nvml",
            "-p",
            "graft-fake-cuda",
        ])
        .output()
        .context("building graft-fake-nvml and graft-fake-cuda")?;
    if !out.status.success() {
        bail!(
            "building graft-fake-nvml and graft-fake-cuda: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let lib = top.join("target/debug").join(name);
    if !lib.is_file() {
        bail!("{} missing after the build", lib.display());
    }
    Ok(lib)
}

/// The fake NVML (`libnvidia_ml.so`), built if needed.
pub fn fake_nvml_lib() -> anyhow::Result<PathBuf> {
    fake_lib("libnvidia_ml.so")
}

/// The fake libcuda (`libcuda.so`, SONAME `libcuda.so.1`), built if needed.
pub fn fake_cuda_lib() -> anyhow::Result<PathBuf> {
    fake_lib("libcuda.so")
}

/// Compiles the fake nvidia-smi (integration/fake-nvml/nvidia-smi.c) to `out`: a static
/// ELF executable holding [`DRIVER_VERSION`], so that it runs chrooted into the fake root
/// and in a busybox container alike.
pub fn build_fake_nvidia_smi(out: &Path) -> anyhow::Result<()> {
    build_static_c("nvidia-smi.c", out)
}

/// Compiles the fake MPS control program (integration/fake-nvml/nvidia-cuda-mps-control.c)
/// to `out`, as [`build_fake_nvidia_smi`] does nvidia-smi: `-d` starts a control daemon on
/// `$CUDA_MPS_PIPE_DIRECTORY/control` that logs to `$CUDA_MPS_LOG_DIRECTORY/control.log`,
/// and with no argument it sends stdin's commands to that daemon (see the source).
pub fn build_fake_mps_control(out: &Path) -> anyhow::Result<()> {
    build_static_c("nvidia-cuda-mps-control.c", out)
}

/// Compiles the fake MPS server (integration/fake-nvml/nvidia-cuda-mps-server.c), which the
/// fake control daemon starts from PATH, to `out`.
pub fn build_fake_mps_server(out: &Path) -> anyhow::Result<()> {
    build_static_c("nvidia-cuda-mps-server.c", out)
}

/// Compiles integration/fake-nvml/`src` with gcc -static to `out`, with [`DRIVER_VERSION`]
/// as `DRIVER_VERSION`. Each build is kept in the temp directory under the hash of its
/// source and settings, so that the suite's many fake nodes compile each program once.
fn build_static_c(src: &str, out: &Path) -> anyhow::Result<()> {
    build_static_c_of(src, out, DRIVER_VERSION)
}

/// [`build_static_c`] for driver `version`.
fn build_static_c_of(src: &str, out: &Path, version: &str) -> anyhow::Result<()> {
    use sha2::{Digest, Sha256};
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fake-nvml")
        .join(src);
    let code = std::fs::read(&src).with_context(|| format!("{}", src.display()))?;
    let mut h = Sha256::new();
    h.update(version.as_bytes());
    h.update(&code);
    // The stand-ins include the headers beside them.
    for e in std::fs::read_dir(src.with_file_name(""))?.flatten() {
        if e.path().extension().is_some_and(|x| x == "h") {
            h.update(std::fs::read(e.path())?);
        }
    }
    let digest = h.finalize();
    let key: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    let cache = std::env::temp_dir().join("graft-fake-bin");
    std::fs::create_dir_all(&cache)?;
    let stem = src.file_stem().and_then(|s| s.to_str()).unwrap_or("fake");
    let built = cache.join(format!("{stem}-{key}"));
    if !built.exists() {
        // Built under a name of this process and call (the suite's threads build at once),
        // renamed into place whole.
        static BUILDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = cache.join(format!("{stem}-{key}.{}.{n}.tmp", std::process::id()));
        let res = Command::new("gcc")
            .args(["-static", "-O2", "-Wall"])
            .arg(format!("-DDRIVER_VERSION=\"{version}\""))
            .arg("-o")
            .arg(&tmp)
            .arg(&src)
            .output()
            .context("running gcc (packages gcc and libc6-dev, installed by the testbed setup)")?;
        if !res.status.success() {
            let _ = std::fs::remove_file(&tmp);
            bail!(
                "gcc -static {}: {}",
                src.display(),
                String::from_utf8_lossy(&res.stderr)
            );
        }
        std::fs::rename(&tmp, &built).with_context(|| format!("{}", built.display()))?;
    }
    if let Some(d) = out.parent() {
        std::fs::create_dir_all(d)?;
    }
    // Copied by a child process, never through a file this process opens for writing: a
    // fork by another of the suite's threads would inherit that descriptor until its exec,
    // and exec'ing `out` meanwhile fails with "Text file busy" (ETXTBSY).
    let copied = Command::new("cp")
        .arg("--")
        .arg(&built)
        .arg(out)
        .output()
        .context("running cp")?;
    if !copied.status.success() {
        bail!(
            "cp {} {}: {}",
            built.display(),
            out.display(),
            String::from_utf8_lossy(&copied.stderr)
        );
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(path, text).with_context(|| format!("{}", path.display()))
}

impl FakeNode {
    /// graft-driver's arguments that point the nvidia backend at this node (its driver root,
    /// sysfs and proc), with graft-hook installed from `hook_source` to `hook_path`. The
    /// caller names the backends (`--discovery`).
    pub fn nvidia_args(&self, hook_path: &Path, hook_source: &Path) -> Vec<String> {
        let arg = |p: &Path| p.to_string_lossy().into_owned();
        vec![
            "--nvidia-driver-root".into(),
            arg(&self.host),
            "--sysfs-root".into(),
            arg(&self.sys),
            "--proc-root".into(),
            arg(&self.proc),
            "--nvidia-hook-path".into(),
            arg(hook_path),
            "--hook-source".into(),
            arg(hook_source),
        ]
    }

    /// graft-driver's arguments for the nvidia backend on this node with VFIO passthrough:
    /// graft-hook installed from `hook_source` to `hook_path`, binds given up after
    /// `vfio_timeout_s`.
    pub fn passthrough_driver_args(
        &self,
        hook_path: &Path,
        hook_source: &Path,
        vfio_timeout_s: u64,
    ) -> Vec<String> {
        let mut a: Vec<String> = vec!["--discovery".into(), "nvidia".into()];
        a.extend(self.nvidia_args(hook_path, hook_source));
        a.extend([
            "--nvidia-passthrough".into(),
            "--nvidia-vfio-timeout-seconds".into(),
            vfio_timeout_s.to_string(),
        ]);
        a
    }

    /// Lays out a fake node under `dir`.
    pub fn create(dir: &Path) -> anyhow::Result<Self> {
        let node = FakeNode {
            host: dir.join("host"),
            proc: dir.join("proc"),
            sys: dir.join("sys"),
            dev: dir.join("host/dev"),
        };
        let lib = fake_nvml_lib()?;
        let libdir = node.host.join(&LIB_DIR[1..]);
        std::fs::create_dir_all(libdir.join("vdpau"))?;
        // Every dummy library is a real ELF shared object (a copy of the fake NVML), so
        // that ldconfig inside a container lists them; libcuda is the fake CUDA driver.
        for name in ["libnvidia-ml", "libnvidia-ptxjitcompiler", "libnvidia-nvvm"] {
            std::fs::copy(&lib, libdir.join(format!("{name}.so.{DRIVER_VERSION}")))?;
        }
        std::fs::copy(
            fake_cuda_lib()?,
            libdir.join(format!("libcuda.so.{DRIVER_VERSION}")),
        )?;
        std::fs::copy(
            &lib,
            libdir.join(format!("vdpau/libvdpau_nvidia.so.{DRIVER_VERSION}")),
        )?;
        symlink(
            format!("libnvidia-ml.so.{DRIVER_VERSION}"),
            libdir.join("libnvidia-ml.so.1"),
        )?;
        symlink(
            format!("libcuda.so.{DRIVER_VERSION}"),
            libdir.join("libcuda.so.1"),
        )?;
        symlink("libcuda.so.1", libdir.join("libcuda.so"))?;
        // nvidia-smi: a static executable that says what it was asked and logs it, for
        // graft-driver (which runs it chrooted into the driver root) and for containers.
        let smi = node.host.join("usr/bin/nvidia-smi");
        build_fake_nvidia_smi(&smi)?;
        // nvidia-cuda-mps-control: a static stand-in for the MPS control daemon and its
        // client, beside nvidia-smi.
        let mps = node.mps_control_path();
        build_fake_mps_control(&mps)?;
        let mps_server = node.host.join("usr/bin/nvidia-cuda-mps-server");
        build_fake_mps_server(&mps_server)?;
        std::fs::set_permissions(&mps_server, std::fs::Permissions::from_mode(0o755))?;
        // nvidia-imex and nvidia-imex-ctl: static stand-ins that form a domain over TCP.
        imex::install(&node)?;
        // Mount points graft-mps's sandbox needs in a driver root, as a real root has them.
        for d in ["tmp", "proc"] {
            std::fs::create_dir_all(node.host.join(d))?;
        }
        std::fs::create_dir_all(node.host.join("bin"))?;
        std::fs::create_dir_all(node.host.join("var/log"))?;
        // A shell in the fake root, as driver roots have one.
        std::fs::copy("/bin/busybox", node.host.join("bin/sh")).context(
            "copying the static busybox (package busybox-static) as the fake root's shell",
        )?;
        std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755))?;
        std::fs::set_permissions(&mps, std::fs::Permissions::from_mode(0o755))?;
        let fw = node
            .host
            .join(format!("lib/firmware/nvidia/{DRIVER_VERSION}"));
        write(&fw.join("gsp_ga10x.bin"), "fw")?;
        write(&fw.join("gsp_tu10x.bin"), "fw")?;
        // A real socket (graft accepts nothing else there); nobody listens.
        let sock = node.host.join("run/nvidia-persistenced/socket");
        std::fs::create_dir_all(node.host.join("run/nvidia-persistenced"))?;
        drop(std::os::unix::net::UnixListener::bind(&sock)?);
        std::fs::create_dir_all(&node.dev)?;

        write(
            &node.proc.join("devices"),
            &format!(
                "Character devices:\n  1 mem\n 10 misc\n195 nvidia\n{IMEX_MAJOR} nvidia-caps-imex-channels\n\
                 {CAPS_MAJOR} nvidia-caps\n{UVM_MAJOR} nvidia-uvm\n\nBlock devices:\n  8 sd\n"
            ),
        )?;
        let mut minors = String::from("config 1\nmonitor 2\n");
        for gpu in 0..8u32 {
            for gi in 0..15u32 {
                let base = 3 + gpu * 15 * 9 + gi * 9;
                minors.push_str(&format!("gpu{gpu}/gi{gi}/access {base}\n"));
                for ci in 0..8u32 {
                    minors.push_str(&format!(
                        "gpu{gpu}/gi{gi}/ci{ci}/access {}\n",
                        base + 1 + ci
                    ));
                }
            }
        }
        write(&node.proc.join("driver/nvidia-caps/mig-minors"), &minors)?;
        // One GI has its capability file, with the minor mig-minors gives too.
        write(
            &node
                .proc
                .join("driver/nvidia/capabilities/gpu4/mig/gi1/access"),
            &format!(
                "DeviceFileMinor: {}\nDeviceFileMode: 292\nDeviceFileModify: 1\n",
                Self::gi_cap_minor(4, 1)
            ),
        )?;

        for (i, bus) in PCI_BUSES.iter().enumerate() {
            let bdf = format!("0000:{bus:02x}:00.0");
            let root = format!("pci0000:{:02x}", bus & 0xf0);
            let dev = node
                .sys
                .join(format!("devices/{root}/0000:{:02x}:01.0/{bdf}", bus & 0xf0));
            write(&dev.join("numa_node"), if i < 4 { "0\n" } else { "1\n" })?;
            write(&dev.join("vendor"), "0x10de\n")?;
            write(&dev.join("class"), "0x030200\n")?;
            write(&dev.join("device"), "0x2330\n")?;
            let group = node.sys.join(format!("kernel/iommu_groups/{}", 40 + i));
            std::fs::create_dir_all(group.join("devices"))?;
            symlink(&group, dev.join("iommu_group"))?;
            symlink(&dev, group.join("devices").join(&bdf))?;
            std::fs::create_dir_all(node.sys.join("bus/pci/drivers/nvidia"))?;
            symlink(node.sys.join("bus/pci/drivers/nvidia"), dev.join("driver"))?;
            write(
                &node
                    .proc
                    .join(format!("driver/nvidia/gpus/{bdf}/unbindLock")),
                "0\n",
            )?;
            std::fs::create_dir_all(node.sys.join("bus/pci/devices"))?;
            symlink(&dev, node.sys.join("bus/pci/devices").join(&bdf))?;
        }
        Ok(node)
    }

    /// The fake NVML's event feed, next to `libnvidia-ml.so.1` (format in
    /// integration/fake-nvml/src/events.rs). [`FakeNode::create`] does not create it: an
    /// absent file means no events and no lost GPU, and the first [`FakeNode::inject`]
    /// creates it.
    pub fn events_file(&self) -> PathBuf {
        self.host.join(&LIB_DIR[1..]).join("fake-nvml-events")
    }

    /// Appends `line` (e.g. `3 xid 79`, `2 lost`) to [`FakeNode::events_file`] in one
    /// write, so that the fake never sees part of it as a complete line.
    pub fn inject(&self, line: &str) -> anyhow::Result<()> {
        if line.contains('\n') {
            bail!("one event line at a time: {line:?}");
        }
        let path = self.events_file();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("{}", path.display()))?;
        f.write_all(format!("{line}\n").as_bytes())
            .with_context(|| format!("{}", path.display()))
    }

    /// The fake NVML's MIG configuration, next to `libnvidia-ml.so.1` (format in
    /// integration/fake-nvml/src/mig/config.rs); absent until [`FakeNode::configure_mig`].
    pub fn mig_config_file(&self) -> PathBuf {
        self.host.join(&LIB_DIR[1..]).join("fake-nvml-mig")
    }

    /// Replaces the fake NVML's MIG configuration with `lines` (e.g. `"mig 5 on\nstate
    /// <dir>/mig-state\n"`) in one rename: the library reads it on every call, and must
    /// never see half of it.
    pub fn configure_mig(&self, lines: &str) -> anyhow::Result<()> {
        let path = self.mig_config_file();
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, lines).with_context(|| format!("{}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("{}", path.display()))
    }

    /// The GPU and compute instances in a fake NVML MIG state file (the `state` path given
    /// to [`FakeNode::configure_mig`]), by GPU then GI id. The library writes the file on
    /// its first MIG call (with its initial instances: those of GPUs 6 and 7, where MIG is
    /// on); until then, an absent file lists nothing.
    pub fn mig_instances(state: &Path) -> anyhow::Result<Vec<MigInstance>> {
        let text = match std::fs::read_to_string(state) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).with_context(|| format!("{}", state.display())),
        };
        let mut out: Vec<MigInstance> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or_default();
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some((kind, rest)) = words.split_first() else {
                continue;
            };
            let bad = || format!("{} line {}: {line:?}", state.display(), n + 1);
            let nums = rest
                .iter()
                .map(|w| w.parse::<u32>())
                .collect::<Result<Vec<u32>, _>>()
                .with_context(bad)?;
            match (*kind, nums.as_slice()) {
                ("gi", &[gpu, gi, profile, start, size]) => out.push(MigInstance {
                    gpu: gpu as usize,
                    gi,
                    profile,
                    start,
                    size,
                    cis: Vec::new(),
                }),
                ("ci", &[gpu, gi, ci, _profile, _start]) => out
                    .iter_mut()
                    .find(|m| m.gpu == gpu as usize && m.gi == gi)
                    .with_context(|| format!("{}: compute instance of no GPU instance", bad()))?
                    .cis
                    .push(ci),
                _ => bail!("{}", bad()),
            }
        }
        out.sort_by_key(|m| (m.gpu, m.gi));
        for m in &mut out {
            m.cis.sort_unstable();
        }
        Ok(out)
    }

    /// What graft-driver asked nvidia-smi, one call a line.
    pub fn smi_calls(&self) -> String {
        std::fs::read_to_string(self.host.join("var/log/fake-nvidia-smi.log")).unwrap_or_default()
    }

    /// Replaces the MPS control program and server with those of driver `version` (from
    /// 615 on they have MPS v3, `-p 3`). Only the MPS programs change: graft-mps runs the
    /// driver root's control program whatever its version, and the rest of the node stays
    /// [`DRIVER_VERSION`].
    pub fn install_mps_of(&self, version: &str) -> anyhow::Result<()> {
        build_static_c_of(
            "nvidia-cuda-mps-control.c",
            &self.mps_control_path(),
            version,
        )?;
        let server = self.host.join("usr/bin/nvidia-cuda-mps-server");
        build_static_c_of("nvidia-cuda-mps-server.c", &server, version)?;
        for p in [self.mps_control_path(), server] {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(())
    }

    /// The fake `nvidia-cuda-mps-control`, at `/usr/bin` in the driver root, as this host
    /// sees it.
    pub fn mps_control_path(&self) -> PathBuf {
        self.host.join("usr/bin/nvidia-cuda-mps-control")
    }

    /// Whether an MPS control daemon (the fake's, or any speaking its protocol) answers
    /// `get_server_list` on `<pipe_dir>/control`, as `echo get_server_list |
    /// nvidia-cuda-mps-control` tells graft.
    pub fn mps_daemon_running(pipe_dir: &Path) -> bool {
        let ask = || -> std::io::Result<()> {
            let mut s = UnixStream::connect(pipe_dir.join("control"))?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            s.set_write_timeout(Some(Duration::from_secs(5)))?;
            s.write_all(b"get_server_list\n")?;
            s.shutdown(std::net::Shutdown::Write)?;
            // The daemon answers, then closes.
            std::io::copy(&mut s.take(1 << 20), &mut std::io::sink())?;
            Ok(())
        };
        ask().is_ok()
    }

    /// The fake MPS control daemon's log, `<log_dir>/control.log` (`log_dir` being its
    /// `CUDA_MPS_LOG_DIRECTORY`): `[<unix time>] Startup CUDA_VISIBLE_DEVICES=<value>`,
    /// `[<time>] Command <line>`, `Server ...`, `Client ...` and `[<time>] Shutdown` lines
    /// (integration/fake-nvml/nvidia-cuda-mps-control.c); empty when there is none.
    pub fn mps_log(log_dir: &Path) -> String {
        std::fs::read_to_string(log_dir.join("control.log")).unwrap_or_default()
    }

    /// The fake MPS servers' log, `<log_dir>/server.log`: each client's effective limits
    /// (integration/fake-nvml/nvidia-cuda-mps-server.c); empty when there is none.
    pub fn mps_server_log(log_dir: &Path) -> String {
        std::fs::read_to_string(log_dir.join("server.log")).unwrap_or_default()
    }

    /// The minor of GPU instance `gi`'s capability node, as `mig-minors` numbers it.
    pub fn gi_cap_minor(gpu_minor: u32, gi: u32) -> u32 {
        3 + gpu_minor * 15 * 9 + gi * 9
    }

    /// The minor of compute instance `ci`'s capability node, as `mig-minors` numbers it.
    pub fn ci_cap_minor(gpu_minor: u32, gi: u32, ci: u32) -> u32 {
        Self::gi_cap_minor(gpu_minor, gi) + 1 + ci
    }
}
