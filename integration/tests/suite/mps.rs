//! MPS end to end without a cluster: graft-driver's side (the nvidia backend's setup with
//! its MpsManager) and graft-mps (the workspace binary, as a child) on the fake node, with
//! the stand-in daemon and server and the CUDA probe as clients. A GPU serves one namespace
//! at a time; a tenancy gets fresh directories, a size-limited tmpfs, and the namespace's
//! limits on the server side whatever a client's environment says; a tenant's `quit` and
//! planted files reach nothing outside it; the last share ends the tenancy and leaves
//! nothing; graft-mps restarted adopts the tenancy's directories.
//!
//! Needs root (mounts, a /dev per client, servers of other UIDs), gcc, cc and the
//! workspace binaries (`cargo build --workspace --bins`).

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use graft_driver::claims::setup_port::{DeviceSetup, Setup};
use graft_driver::discovery::nvidia::nvml::GpuSelection;
use graft_driver::discovery::nvidia::setup::MpsManager;
use graft_driver::discovery::nvidia::NvidiaDiscovery;
use graft_driver::discovery::Discovery;
use graft_driver::model::Allocated;
use graft_driver::model::Device;
use graft_driver::mps::{self, GpuPaths, Phase};
use graft_integration::fake_gpu::{FakeNode, LIB_DIR};
use graft_integration::fake_mps::{send_control, with_gpu_dev, PIPE_IN_DEV};
use graft_integration::gpu_check::compile_probe;
use graft_integration::testbed::workspace_bin;

const SHM: u64 = 8 << 20;

/// graft-mps as a child process; stopped (SIGTERM) on drop.
pub(crate) struct GraftMps(Child);

impl GraftMps {
    pub(crate) fn start(state: &Path, node: &FakeNode, log: &Path) -> GraftMps {
        GraftMps::start_with(state, node, log, &[])
    }

    /// [`GraftMps::start`] with `extra` arguments.
    pub(crate) fn start_with(
        state: &Path,
        node: &FakeNode,
        log: &Path,
        extra: &[&str],
    ) -> GraftMps {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = Command::new(workspace_bin("graft-mps").unwrap())
            .arg("--state-dir")
            .arg(state)
            .arg("--nvidia-driver-root")
            .arg(&node.host)
            .args(["--shm-size", "8Mi", "--resync-seconds", "2"])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        GraftMps(child)
    }

    pub(crate) fn stop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let start = Instant::now();
        while self.0.try_wait().unwrap().is_none() {
            if start.elapsed() > Duration::from_secs(20) {
                let _ = self.0.kill();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for GraftMps {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Unmounts whatever is left mounted below `dir` however the test ends.
pub(crate) struct Unmount(pub(crate) PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        for m in mounts_below(&self.0) {
            let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

pub(crate) fn mounts_below(dir: &Path) -> Vec<String> {
    let prefix = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|m| m.starts_with(&prefix))
        .collect()
}

pub(crate) fn share(id: &str, compute: &str, memory: &str) -> Allocated {
    Allocated {
        device: "gpu-2".into(),
        share_id: Some(id.into()),
        consumed: BTreeMap::from([
            ("compute".to_string(), compute.to_string()),
            ("memory".to_string(), memory.to_string()),
        ]),
        ..Default::default()
    }
}

pub(crate) fn env(e: &graft_record::ContainerEdits, name: &str) -> Option<String> {
    e.env
        .iter()
        .find(|v| v.name == name)
        .map(|v| v.value.clone())
}

pub(crate) fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(30), "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) struct Bed {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) node: FakeNode,
    pub(crate) state: PathBuf,
    gpu: Device,
    probe: PathBuf,
}

impl Bed {
    pub(crate) fn new() -> Bed {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let node = FakeNode::create(&dir.path().join("node")).unwrap();
        let mut config =
            common::discovery_config(&node, common::as_driver_root(&node), 0, "/bin/true");
        config.mps = GpuSelection::parse("0").unwrap();
        let gpu = NvidiaDiscovery::new(config)
            .unwrap()
            .discover()
            .unwrap()
            .into_iter()
            .find(|d| d.name == "gpu-2")
            .unwrap();
        let probe = dir.path().join("probe");
        compile_probe(&probe).unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        Bed {
            node,
            state,
            gpu,
            probe,
            dir,
        }
    }

    fn manager(&self) -> MpsManager {
        MpsManager::new(self.state.clone(), Duration::from_secs(20))
    }

    /// graft-driver's setup, its prepares waiting up to `wait` for graft-mps.
    pub(crate) fn setup_waiting(
        &self,
        wait: Duration,
    ) -> graft_driver::discovery::nvidia::setup::NvidiaSetup {
        let manager = MpsManager::new(self.state.clone(), wait);
        common::nvidia_setup(&self.node, None, Some(manager))
    }

    pub(crate) fn paths(&self) -> GpuPaths {
        let uuid = self.gpu.string_attribute("uuid").unwrap();
        GpuPaths::new(&self.state, uuid).unwrap()
    }

    pub(crate) fn plan(&self, ns: &str, alloc: &Allocated) -> Setup {
        let setup = common::nvidia_setup(&self.node, None, Some(self.manager()));
        let planned = setup.plan(&self.gpu, None, alloc).unwrap().unwrap();
        setup
            .for_claim(
                planned,
                ns,
                &format!("claim-{}", alloc.share_id.as_deref().unwrap_or("")),
            )
            .unwrap()
    }

    /// Namespace a's two shares: 40 % and 30 GiB, 60 % and 40 GiB.
    pub(crate) fn two_shares_of_a(&self) -> (Setup, Setup) {
        (
            self.plan(
                "a",
                &share("1b4e28ba-2fa1-11d2-883f-0016d3cca427", "40", "30Gi"),
            ),
            self.plan(
                "a",
                &share("6fa459ea-ee8a-3ca4-894e-db77e160355e", "60", "40Gi"),
            ),
        )
    }

    pub(crate) fn setup(&self) -> graft_driver::discovery::nvidia::setup::NvidiaSetup {
        common::nvidia_setup(&self.node, None, Some(self.manager()))
    }

    pub(crate) fn log_dir(&self, generation: u64) -> PathBuf {
        self.paths().tenancy(generation).log()
    }

    /// The probe as a tenant's container runs it: the edits' env, pipe directory and shared
    /// memory (the pipe directory where a bind puts it).
    pub(crate) fn probe(
        &self,
        uid: u32,
        edits: &graft_record::ContainerEdits,
        keep_env: bool,
    ) -> String {
        let shm = PathBuf::from(&edits.mounts[1].source);
        let pipe = PathBuf::from(&edits.mounts[0].source);
        let mut c = Command::new(&self.probe);
        c.env_clear()
            .env("LD_LIBRARY_PATH", self.node.host.join(&LIB_DIR[1..]))
            .env("CUDA_MPS_PIPE_DIRECTORY", PIPE_IN_DEV);
        if keep_env {
            for e in &edits.env {
                if e.name != "CUDA_MPS_PIPE_DIRECTORY" {
                    c.env(&e.name, &e.value);
                }
            }
        }
        with_gpu_dev(&mut c, uid, Some(&shm), Some(&pipe));
        let out = c.output().unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

pub(crate) fn root() -> bool {
    let ok = nix::unistd::geteuid().is_root();
    if !ok {
        eprintln!("skipped: graft-mps mounts and sandboxes, the clients need a /dev of their own");
    }
    ok
}

#[test]
fn tenancies_are_one_namespace_at_a_time_and_hold_their_limits() {
    if !root() {
        return;
    }
    let bed = Bed::new();
    let _unmount = Unmount(bed.dir.path().to_path_buf());
    let mut graft_mps =
        GraftMps::start(&bed.state, &bed.node, &bed.dir.path().join("graft-mps.log"));
    let s = bed.setup();
    let gpu = bed.paths();

    // Namespace a: two shares, one daemon with the namespace's total as its limits.
    let (a1, a2) = bed.two_shares_of_a();
    let started = Instant::now();
    let e1 = s.apply(&a1).unwrap().unwrap();
    println!(
        "prepare of a new tenancy's first share: {:?}",
        started.elapsed()
    );
    assert_eq!(
        env(&e1, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE").as_deref(),
        Some("40")
    );
    assert_eq!(
        env(&e1, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT").as_deref(),
        Some("0=30720M")
    );
    let t1 = gpu.tenancy(1);
    assert_eq!(e1.mounts[0].source, t1.pipe().to_string_lossy());
    assert_eq!(e1.mounts[0].destination, "/tmp/nvidia-mps");
    assert_eq!(e1.mounts[1].source, t1.shm().to_string_lossy());
    let mode = std::fs::metadata(t1.pipe()).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o1777, "non-root clients need the pipe directory");
    assert!(mounts_below(&t1.dir).contains(&t1.shm().to_string_lossy().into_owned()));
    let started = Instant::now();
    let e2 = s.apply(&a2).unwrap().unwrap();
    println!("prepare of a share joining it: {:?}", started.elapsed());
    let log = || FakeNode::mps_log(&bed.log_dir(1));
    assert_eq!(log().matches("Startup").count(), 1, "{}", log());
    for want in [
        "Command set_default_active_thread_percentage 40\n",
        "Command set_default_device_pinned_mem_limit 0 30720M\n",
        "Command set_default_active_thread_percentage 100\n",
        "Command set_default_device_pinned_mem_limit 0 71680M\n",
    ] {
        assert!(log().contains(want), "{want:?} not in\n{}", log());
    }

    // Namespace b is refused while a holds the GPU, saying why.
    let b1 = bed.plan(
        "b",
        &share("7c9e6679-7425-40de-944b-e07fc1f90ae7", "10", "1Gi"),
    );
    let err = s.apply(&b1).unwrap_err().to_string();
    assert!(
        err.contains("namespace \"a\"") && err.contains("one GPU"),
        "{err}"
    );

    // Clients: their own limits when they keep the env; without it, still the server's
    // (the namespace's total), never the whole GPU; a non-root one works too.
    assert!(bed.probe(0, &e1, true).contains("PROBE PASS"));
    assert!(bed.probe(0, &e2, false).contains("PROBE PASS"));
    let out = bed.probe(1000, &e2, true);
    assert!(out.contains("PROBE PASS"), "{out}");
    let server = FakeNode::mps_server_log(&bed.log_dir(1));
    for want in [
        "uid 0 active_thread_percentage 40 pinned_mem_limit 0=30720M (server 100 0=71680M; client asked 40 0=30720M)",
        "uid 0 active_thread_percentage 100 pinned_mem_limit 0=71680M (server 100 0=71680M; client asked - -)",
        "uid 1000 active_thread_percentage 60 pinned_mem_limit 0=40960M",
    ] {
        assert!(server.contains(want), "{want:?} not in\n{server}");
    }

    // A tenant's /dev/shm is the tenancy's tmpfs: full at its size, nothing on the host.
    // The secret goes in first: what the filled tmpfs frees on unlink is not this test's
    // point, and under load it was once not free again at once.
    std::fs::write(t1.shm().join("secret"), "a's").unwrap();
    let big = std::fs::write(t1.shm().join("big"), vec![0u8; 2 * SHM as usize]);
    assert!(big.is_err(), "wrote past the tmpfs size");
    std::fs::remove_file(t1.shm().join("big")).unwrap();

    // A tenant plants a symlink and a FIFO, then quits the daemon: graft-mps starts it
    // again on an emptied pipe directory; what the links point at is untouched.
    let victim = bed.dir.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let pid_file = t1.pipe().join("nvidia-cuda-mps-control.pid");
    std::fs::remove_file(&pid_file).unwrap();
    std::os::unix::fs::symlink(&victim, &pid_file).unwrap();
    nix::unistd::mkfifo(
        &t1.pipe().join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o666),
    )
    .unwrap();
    let quit = Instant::now();
    assert_eq!(send_control(&t1.pipe(), "quit").unwrap(), "");
    wait_for("graft-mps did not start the daemon again", || {
        log().matches("Startup").count() == 2
    });
    wait_for("the limits were not set again", || {
        log()
            .rsplit("Startup")
            .next()
            .is_some_and(|l| l.contains("set_default_active_thread_percentage 100"))
    });
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    assert!(!t1.pipe().join("fifo").exists());
    assert!(!std::fs::symlink_metadata(&pid_file)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(bed.probe(0, &e1, true).contains("PROBE PASS"));
    println!("quit to the daemon serving again: {:?}", quit.elapsed());

    // The last share goes: the tenancy goes, tmpfs and directories; b's share is served
    // on a fresh one, without a's file.
    s.undo(&a1).unwrap();
    s.undo(&a2).unwrap();
    s.undo(&a2).unwrap();
    let started = Instant::now();
    wait_for("the tenancy outlived its shares", || !t1.dir.exists());
    println!(
        "last share's unprepare to the tenancy gone: {:?}",
        started.elapsed()
    );
    assert!(
        mounts_below(&gpu.dir).is_empty(),
        "{:?}",
        mounts_below(&gpu.dir)
    );
    let eb = s.apply(&b1).unwrap().unwrap();
    let t2 = gpu.tenancy(2);
    assert_eq!(eb.mounts[1].source, t2.shm().to_string_lossy());
    assert!(!t2.shm().join("secret").exists());
    assert_eq!(mps::read_status(&gpu).unwrap().namespace, "b");

    // graft-mps restarts: it adopts b's tenancy (same directories, which pods have mounted).
    graft_mps.stop();
    let before = FakeNode::mps_log(&bed.log_dir(2))
        .matches("Startup")
        .count();
    let graft_mps = GraftMps::start(&bed.state, &bed.node, &bed.dir.path().join("graft-mps.log"));
    wait_for("graft-mps did not adopt the tenancy", || {
        FakeNode::mps_log(&bed.log_dir(2))
            .matches("Startup")
            .count()
            == before + 1
    });
    wait_for("the adopted tenancy never became ready", || {
        mps::read_status(&gpu).is_some_and(|s| (s.generation, s.phase) == (2, Phase::Ready))
    });
    assert!(bed.probe(0, &eb, true).contains("PROBE PASS"));
    s.undo(&b1).unwrap();
    wait_for("b's tenancy outlived its share", || !t2.dir.exists());
    drop(graft_mps);
}

#[test]
fn the_sandbox_keeps_the_daemon_off_the_host() {
    if !root() {
        return;
    }
    use graft_driver::mps::sandbox::{Node, Spec};
    let bed = Bed::new();
    let _unmount = Unmount(bed.dir.path().to_path_buf());
    let t = bed.paths().tenancy(9);
    for (d, mode) in [
        (&t.dir, 0o711),
        (&t.pipe(), 0o1777),
        (&t.log(), 0o700),
        (&t.shm(), 0o700),
        (&t.root(), 0o700),
    ] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    // Planted before the daemon starts (graft-mps empties the directory first; here the
    // sandbox alone must hold): the pid file is a symlink to a host file, as the host's
    // init sees it. The sandbox puts a file of its own in its place, never following it.
    let victim = bed.dir.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let pid_file = t.pipe().join("nvidia-cuda-mps-control.pid");
    let through_init = format!("/proc/1/root{}", victim.display());
    std::os::unix::fs::symlink(&through_init, &pid_file).unwrap();
    let spec = Spec {
        driver_root: bed.node.host.clone(),
        tenancy: t.clone(),
        gpu_uuid: "GPU-test".into(),
        nodes: vec![Node {
            name: "nvidiactl".into(),
            major: 195,
            minor: 255,
        }],
        protocol: mps::protocol::Protocol::Legacy,
    };
    // The daemon runs; its control client runs inside the sandbox too.
    let pid = mps::daemon::start(&spec).unwrap();
    mps::daemon::apply_limits(pid, 30, Some(512), Duration::from_secs(5)).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    let planted = std::fs::symlink_metadata(&pid_file).unwrap();
    assert!(planted.file_type().is_file(), "{planted:?}");
    // Nothing of the sandbox is mounted on the host.
    assert!(
        mounts_below(&t.dir).is_empty(),
        "{:?}",
        mounts_below(&t.dir)
    );
    let log = FakeNode::mps_log(&t.log());
    assert!(
        log.contains("Startup CUDA_VISIBLE_DEVICES=GPU-test"),
        "{log}"
    );
    assert!(
        log.contains("Command set_default_device_pinned_mem_limit 0 512M"),
        "{log}"
    );
    // The daemon sees the driver root read-only and none of the host's files.
    let root = std::fs::read_link(format!("/proc/{pid}/root")).unwrap();
    assert_eq!(root, Path::new("/"));
    assert!(std::fs::metadata(format!("/proc/{pid}/root{}", victim.display())).is_err());
    mps::daemon::stop(pid, mps::protocol::Protocol::Legacy);
    assert!(mounts_below(&t.dir).is_empty());
}
