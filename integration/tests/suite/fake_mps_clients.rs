//! The fake MPS daemon's servers and their clients (integration/fake-nvml/
//! nvidia-cuda-mps-{control,server}.c, the client in integration/fake-cuda/src/mps.rs),
//! through graft's CUDA probe: one server per UID started as that UID, a client of another
//! UID queued until the running server's clients are done, the server-side limits lowered
//! by a client's environment (never raised), the per-server commands, a server that cannot
//! listen in a pipe directory its UID cannot write, and a program without a daemon running
//! directly.
//!
//! Needs root (servers run as other UIDs; each process gets a /dev of its own holding the
//! fake GPU's nodes, which the fakes need as the real ones do), gcc and cc.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use graft_integration::fake_gpu::{FakeNode, LIB_DIR};
use graft_integration::fake_mps::{attach, with_gpu_dev};
use graft_integration::gpu_check::compile_probe;

pub(crate) const OTHER_UID: u32 = 1000;

pub(crate) struct Bed {
    _dir: tempfile::TempDir,
    node: FakeNode,
    pub(crate) pipe: PathBuf,
    log: PathBuf,
    probe: PathBuf,
    daemon: Option<Child>,
}

impl Bed {
    fn new(pipe_mode: u32) -> Bed {
        Bed::start(pipe_mode, None, &["-f"])
    }

    /// A daemon of the MPS programs of driver `version` (when given), started with `args`.
    pub(crate) fn start(pipe_mode: u32, version: Option<&str>, args: &[&str]) -> Bed {
        let dir = tempfile::tempdir().unwrap();
        // Other UIDs reach the fake driver's libraries and the probe.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let node = FakeNode::create(&dir.path().join("node")).unwrap();
        if let Some(v) = version {
            node.install_mps_of(v).unwrap();
        }
        let probe = dir.path().join("probe");
        compile_probe(&probe).unwrap();
        let pipe = dir.path().join("pipe");
        std::fs::create_dir(&pipe).unwrap();
        std::fs::set_permissions(&pipe, std::fs::Permissions::from_mode(pipe_mode)).unwrap();
        let log = dir.path().join("log");
        let mut bed = Bed {
            _dir: dir,
            node,
            pipe,
            log,
            probe,
            daemon: None,
        };
        let mut cmd = bed.mps(args);
        let child = with_gpu_dev(&mut cmd, 0, None, None)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        bed.daemon = Some(child);
        let start = Instant::now();
        while !FakeNode::mps_daemon_running(&bed.pipe) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the daemon never listened"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        bed
    }

    pub(crate) fn mps(&self, args: &[&str]) -> Command {
        let mut c = Command::new(self.node.mps_control_path());
        c.args(args)
            .env_clear()
            .env("PATH", self.node.host.join("usr/bin"))
            .env("CUDA_MPS_PIPE_DIRECTORY", &self.pipe)
            .env("CUDA_MPS_LOG_DIRECTORY", &self.log)
            .env("CUDA_VISIBLE_DEVICES", "GPU-test");
        c
    }

    pub(crate) fn control(&self, commands: &str) -> String {
        let mut c = self.mps(&[]);
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(commands.as_bytes())
            .unwrap();
        String::from_utf8_lossy(&child.wait_with_output().unwrap().stdout).into_owned()
    }

    /// The probe as `uid`, with `env`.
    pub(crate) fn probe(&self, uid: u32, env: &[(&str, &str)]) -> Command {
        let mut c = Command::new(&self.probe);
        c.env_clear()
            .env("LD_LIBRARY_PATH", self.node.host.join(&LIB_DIR[1..]))
            .env("CUDA_MPS_PIPE_DIRECTORY", &self.pipe)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        with_gpu_dev(&mut c, uid, None, None);
        c
    }

    pub(crate) fn control_log(&self) -> String {
        FakeNode::mps_log(&self.log)
    }

    pub(crate) fn server_log(&self) -> String {
        FakeNode::mps_server_log(&self.log)
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = self.control("quit\n");
        if let Some(mut d) = self.daemon.take() {
            let start = Instant::now();
            while d.try_wait().ok().flatten().is_none() && start.elapsed() < Duration::from_secs(5)
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

pub(crate) fn passed(out: &Output) -> bool {
    out.status.success() && String::from_utf8_lossy(&out.stdout).contains("PROBE PASS")
}

pub(crate) fn text(out: &Output) -> String {
    format!(
        "{}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub(crate) fn root() -> bool {
    let ok = nix::unistd::geteuid().is_root();
    if !ok {
        eprintln!("skipped: servers of other UIDs and the fake /dev need root");
    }
    ok
}

#[test]
fn servers_per_uid_with_server_side_limits() {
    if !root() {
        return;
    }
    let bed = Bed::new(0o1777);
    assert!(bed
        .control(
            "set_default_active_thread_percentage 40\nset_default_device_pinned_mem_limit 0 2G\n"
        )
        .contains("2G"));

    // A client asking less gets less; one asking nothing, or more, gets the server's.
    let out = bed
        .probe(
            0,
            &[
                ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "30"),
                ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G"),
            ],
        )
        .output()
        .unwrap();
    assert!(passed(&out), "{}", text(&out));
    let out = bed
        .probe(
            0,
            &[
                ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "90"),
                ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=8G"),
            ],
        )
        .output()
        .unwrap();
    assert!(passed(&out), "{}", text(&out));
    let out = bed.probe(0, &[]).output().unwrap();
    assert!(passed(&out), "{}", text(&out));
    let log = bed.server_log();
    for want in [
        "active_thread_percentage 30 pinned_mem_limit 0=1024M (server 40 0=2048M; client asked 30 0=1G)",
        "active_thread_percentage 40 pinned_mem_limit 0=2048M (server 40 0=2048M; client asked 90 0=8G)",
        "active_thread_percentage 40 pinned_mem_limit 0=2048M (server 40 0=2048M; client asked - -)",
    ] {
        assert!(log.contains(want), "{want:?} not in\n{log}");
    }
    // Beyond its pinned limit a client's allocation fails (the probe takes 12 MiB).
    let out = bed
        .probe(0, &[("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=8M")])
        .output()
        .unwrap();
    assert!(!passed(&out), "{}", text(&out));
    assert!(text(&out).contains("out of memory"), "{}", text(&out));

    // The running server, by pid: new limits for its later clients.
    let pid: u32 = bed
        .control("get_server_list\n")
        .trim()
        .parse()
        .expect("one server");
    bed.control(&format!(
        "set_active_thread_percentage {pid} 25\nset_device_pinned_mem_limit {pid} 0 512M\n"
    ));
    assert_eq!(
        bed.control(&format!("get_active_thread_percentage {pid}\n")),
        "25.0\n"
    );
    let out = bed.probe(0, &[]).output().unwrap();
    assert!(passed(&out), "{}", text(&out));
    assert!(
        bed.server_log().contains("active_thread_percentage 25 pinned_mem_limit 0=512M (server 25 0=512M; client asked - -)"),
        "{}",
        bed.server_log()
    );

    // A client of another UID while a root client is connected: queued, then served by a
    // server of its own UID once the root client is done.
    let held = attach(&bed.pipe).unwrap();
    // The server answers a client before it reports it to the daemon: wait until the
    // daemon counts it, else a slow machine lets the daemon retire an idle server first.
    let start = Instant::now();
    loop {
        let server = bed.control("get_server_list\n");
        if !bed
            .control(&format!("get_client_list {}\n", server.trim()))
            .trim()
            .is_empty()
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the daemon never counted the client"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut other = bed.probe(OTHER_UID, &[]).spawn().unwrap();
    let start = Instant::now();
    while !bed
        .control_log()
        .contains(&format!("uid {OTHER_UID} queued"))
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{}",
            bed.control_log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        other.try_wait().unwrap().is_none(),
        "the queued client did not wait"
    );
    drop(held);
    let out = other.wait_with_output().unwrap();
    assert!(passed(&out), "{}", text(&out));
    let log = bed.control_log();
    assert!(log.contains(&format!("Server {pid} exited")), "{log}");
    assert!(log.contains(&format!("starting uid {OTHER_UID}")), "{log}");
    assert!(
        bed.server_log()
            .contains(&format!("uid {OTHER_UID} active_thread_percentage 40")),
        "{}",
        bed.server_log()
    );
    for cmd in ["set_default_active_thread_percentage 40", "get_server_list"] {
        assert!(log.contains(&format!("] Command {cmd}\n")), "{cmd}: {log}");
    }
}

#[test]
fn a_uid_that_cannot_write_the_pipe_directory_gets_no_server() {
    if !root() {
        return;
    }
    let bed = Bed::new(0o755);
    let out = bed.probe(OTHER_UID, &[]).output().unwrap();
    assert!(!passed(&out), "{}", text(&out));
    assert!(text(&out).contains("MPS"), "{}", text(&out));
    assert!(
        bed.server_log().contains("cannot listen"),
        "{}",
        bed.server_log()
    );
    // Root's clients still work.
    let out = bed.probe(0, &[]).output().unwrap();
    assert!(passed(&out), "{}", text(&out));
}

#[test]
fn without_a_daemon_a_program_runs_directly() {
    if !root() {
        return;
    }
    let bed = Bed::new(0o1777);
    drop(bed.control("quit\n"));
    let start = Instant::now();
    while FakeNode::mps_daemon_running(&bed.pipe) {
        assert!(start.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = bed.probe(OTHER_UID, &[]).output().unwrap();
    assert!(passed(&out), "{}", text(&out));
    assert!(!bed.server_log().contains(&format!("uid {OTHER_UID}")));
}
