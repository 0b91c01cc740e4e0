//! The fake node's `nvidia-cuda-mps-control`
//! (integration/fake-nvml/nvidia-cuda-mps-control.c): `-d` and `-f` start one control
//! daemon per pipe directory and refuse a second one or a pipe directory they cannot use,
//! the client mode talks to it and tells whether one runs, `quit` stops it; and graft's
//! binary discovery accepts it and the server as binaries of the fake driver. Servers and
//! clients: fake_mps_clients.rs.
//!
//! Needs gcc and the static glibc (FakeNode builds its fakes), nothing else: no root, no
//! GPU.

use crate::common;

use std::cell::Cell;
use std::io::Write;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use graft_driver::discovery::nvidia::driver_files;
use graft_driver::discovery::nvidia::driver_files::Capability;
use graft_integration::fake_gpu::{FakeNode, DRIVER_VERSION};
use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

const NOT_RUNNING: &str = "Cannot find MPS control daemon process";

/// One daemon's directories, and the fake program run with them.
struct Mps {
    bin: PathBuf,
    pipe: PathBuf,
    log: PathBuf,
    visible: String,
}

impl Mps {
    fn new(node: &FakeNode, dir: &Path, name: &str, visible: &str) -> Self {
        // The orphaned daemons become this process's children, so that the tests reap
        // them (and see how they exited) rather than leave zombies behind.
        nix::sys::prctl::set_child_subreaper(true).expect("PR_SET_CHILD_SUBREAPER");
        Mps {
            bin: node.mps_control_path(),
            pipe: dir.join(name).join("pipe"),
            log: dir.join(name).join("log"),
            visible: visible.into(),
        }
    }

    /// Runs the program with `args`, `stdin` as its input.
    fn run(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new(&self.bin)
            .args(args)
            .env("CUDA_MPS_PIPE_DIRECTORY", &self.pipe)
            .env("CUDA_MPS_LOG_DIRECTORY", &self.log)
            .env("CUDA_VISIBLE_DEVICES", &self.visible)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running the fake nvidia-cuda-mps-control");
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.as_bytes()).unwrap();
        drop(input);
        // The daemon leaves stdout and stderr: this returns once `-d` has.
        child.wait_with_output().unwrap()
    }

    /// Starts the daemon; stops it when the guard goes, whatever the test did meanwhile.
    fn start(&self) -> Daemon<'_> {
        let out = self.run(&["-d"], "");
        assert!(out.status.success(), "-d: {}", text(&out));
        let pid = self.pid().expect("the daemon's pid file");
        Daemon {
            mps: self,
            pid,
            gone: Cell::new(false),
        }
    }

    /// Sends `commands` (one a line) through the client mode.
    fn client(&self, commands: &str) -> Output {
        self.run(&[], commands)
    }

    fn socket(&self) -> PathBuf {
        self.pipe.join("control")
    }

    fn pid_file(&self) -> PathBuf {
        self.pipe.join("nvidia-cuda-mps-control.pid")
    }

    fn pid(&self) -> Option<Pid> {
        let text = std::fs::read_to_string(self.pid_file()).ok()?;
        Some(Pid::from_raw(text.trim().parse().ok()?))
    }

    fn running(&self) -> bool {
        FakeNode::mps_daemon_running(&self.pipe)
    }

    fn log(&self) -> String {
        FakeNode::mps_log(&self.log)
    }
}

/// A started daemon: quit (else SIGTERM, else SIGKILL) and reaped on drop.
struct Daemon<'a> {
    mps: &'a Mps,
    pid: Pid,
    /// Reaped or seen gone: its pid may be another process's now.
    gone: Cell<bool>,
}

/// How a daemon went.
#[derive(Debug)]
enum Gone {
    /// It exited, and this process reaped it.
    Reaped(WaitStatus),
    /// It is no longer running, and was not this process's child to reap.
    Elsewhere,
}

impl Daemon<'_> {
    /// Waits up to `within` for the daemon to exit, and reaps it.
    fn reap(&self, within: Duration) -> Option<Gone> {
        let deadline = Instant::now() + within;
        loop {
            let gone = match waitpid(self.pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => None,
                Ok(status) => Some(Gone::Reaped(status)),
                Err(Errno::ECHILD) if !alive(self.pid) => Some(Gone::Elsewhere),
                Err(Errno::ECHILD) => None,
                Err(e) => panic!("waitpid {}: {e}", self.pid),
            };
            if gone.is_some() {
                self.gone.set(true);
                return gone;
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon<'_> {
    fn drop(&mut self) {
        if self.gone.get() {
            return;
        }
        let _ = self.mps.client("quit\n");
        if self.reap(Duration::from_secs(5)).is_some() {
            return;
        }
        let _ = kill(self.pid, Signal::SIGTERM);
        if self.reap(Duration::from_secs(5)).is_some() {
            return;
        }
        let _ = kill(self.pid, Signal::SIGKILL);
        let _ = self.reap(Duration::from_secs(5));
    }
}

/// Whether `pid` is a process that has not exited (a zombie has).
fn alive(pid: Pid) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `<pid> (<comm>) <state> ...`: the state follows the last `)`.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}, stdout {:?}, stderr {:?}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

#[test]
fn daemon_starts_answers_and_quits() {
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::create(dir.path()).unwrap();
    let visible = "GPU-6a1f0000-93c1-4d4e-8f7b-0c5e2a900000";
    let mps = Mps::new(&node, dir.path(), "mps", visible);

    // None yet: the client says so, and fails.
    assert!(!mps.running());
    let out = mps.client("get_server_list\n");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(stderr(&out).contains(NOT_RUNNING), "{}", text(&out));

    // -d creates the directories, listens, writes its pid and logs its start.
    let daemon = mps.start();
    assert!(mps.pipe.is_dir() && mps.log.is_dir());
    assert!(
        is_socket(&mps.socket()),
        "no socket at {}",
        mps.socket().display()
    );
    assert!(alive(daemon.pid), "daemon {} not running", daemon.pid);
    assert!(mps.running());
    let log = mps.log();
    assert!(
        log.lines().next().is_some_and(|l| l.starts_with('[')
            && l.ends_with(&format!("] Startup CUDA_VISIBLE_DEVICES={visible}"))),
        "{log}"
    );

    // A second daemon on the same pipe directory is refused; the first one stays.
    let out = mps.run(&["-d"], "");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stderr(&out).contains("An instance of this daemon is already running"),
        "{}",
        text(&out)
    );
    assert_eq!(mps.pid(), Some(daemon.pid));
    assert!(mps.running());

    // The client: graft's probe succeeds with no server listed; the other commands.
    let out = mps.client("get_server_list\n");
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(stdout(&out), "");
    let out = mps.client(
        "get_default_active_thread_percentage\n\
         set_default_active_thread_percentage 25\n\
         get_default_active_thread_percentage\n\
         bogus 1\n",
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(stdout(&out), "100.0\n25\n25.0\nUnknown command\n");
    let log = mps.log();
    for cmd in [
        "get_server_list",
        "set_default_active_thread_percentage 25",
        "bogus 1",
    ] {
        assert!(log.contains(&format!("] Command {cmd}\n")), "{cmd}: {log}");
    }

    // quit: the socket and pid file are gone once the client returns; the daemon exits 0.
    let out = mps.client("quit\n");
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(stdout(&out), "");
    assert!(!mps.socket().exists(), "socket left after quit");
    assert!(!mps.pid_file().exists(), "pid file left after quit");
    let status = daemon.reap(Duration::from_secs(10));
    // This process is the subreaper: the daemon is its child, and exited 0.
    assert!(
        matches!(status, Some(Gone::Reaped(WaitStatus::Exited(_, 0)))),
        "daemon {}: {status:?}",
        daemon.pid
    );
    assert!(!alive(daemon.pid));
    let log = mps.log();
    let last: Vec<&str> = log.lines().rev().take(2).collect();
    assert!(
        last[0].ends_with("] Shutdown") && last[1].ends_with("] Command quit"),
        "{log}"
    );

    // None again.
    assert!(!mps.running());
    let out = mps.client("get_server_list\n");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(stderr(&out).contains(NOT_RUNNING), "{}", text(&out));
    drop(daemon);

    // Other arguments: usage.
    let out = mps.run(&["-x"], "");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(stderr(&out).contains("Usage"), "{}", text(&out));
}

#[test]
fn daemons_on_two_pipe_directories_run_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::create(dir.path()).unwrap();
    let a = Mps::new(&node, dir.path(), "gpu-0", "GPU-a");
    let b = Mps::new(&node, dir.path(), "gpu-1", "GPU-b");
    let da = a.start();
    let db = b.start();
    assert_ne!(da.pid, db.pid);
    assert!(a.running() && b.running());
    assert!(a.log().contains("Startup CUDA_VISIBLE_DEVICES=GPU-a\n"));
    assert!(b.log().contains("Startup CUDA_VISIBLE_DEVICES=GPU-b\n"));

    // Each answers its own clients.
    let out = a.client("set_default_active_thread_percentage 50\n");
    assert_eq!(stdout(&out), "50\n", "{}", text(&out));
    let out = b.client("get_default_active_thread_percentage\n");
    assert_eq!(stdout(&out), "100.0\n", "{}", text(&out));
    let out = a.client("get_default_active_thread_percentage\n");
    assert_eq!(stdout(&out), "50.0\n", "{}", text(&out));

    // Quitting one leaves the other.
    let out = a.client("quit\n");
    assert!(out.status.success(), "{}", text(&out));
    assert!(da.reap(Duration::from_secs(10)).is_some());
    assert!(!a.running());
    assert!(b.running());
    assert!(!b.log().contains("Shutdown"));
    drop(db);
    assert!(!b.running());
    assert!(b.log().contains("] Shutdown\n"));
}

#[test]
fn a_stale_socket_does_not_stop_a_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::create(dir.path()).unwrap();
    let mps = Mps::new(&node, dir.path(), "mps", "0");
    // A socket file nobody listens on, as a killed daemon leaves.
    std::fs::create_dir_all(&mps.pipe).unwrap();
    drop(UnixListener::bind(mps.socket()).unwrap());
    assert!(is_socket(&mps.socket()));
    assert!(!mps.running());
    let out = mps.client("get_server_list\n");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));

    let daemon = mps.start();
    assert!(mps.running());
    drop(daemon);
    assert!(!mps.running());
}

#[test]
fn foreground_daemon_and_unusable_pipe_directories() {
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::create(dir.path()).unwrap();
    let mps = Mps::new(&node, dir.path(), "mps", "GPU-f");
    // -f: the daemon is the process started, as graft-mps runs it.
    let mut fg = Command::new(&mps.bin)
        .arg("-f")
        .env("CUDA_MPS_PIPE_DIRECTORY", &mps.pipe)
        .env("CUDA_MPS_LOG_DIRECTORY", &mps.log)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !mps.running() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "-f never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(mps.pid(), Some(Pid::from_raw(fg.id() as i32)));
    // A second one, either way, is refused.
    for flag in ["-d", "-f"] {
        let out = mps.run(&[flag], "");
        assert_eq!(out.status.code(), Some(1), "{flag}: {}", text(&out));
        assert!(stderr(&out).contains("already running"), "{}", text(&out));
    }
    assert!(mps.client("quit\n").status.success());
    let status = fg.wait().unwrap();
    assert!(status.success(), "{status}");

    // A pipe directory that is a file, or that the daemon cannot write: refused.
    let file = Mps::new(&node, dir.path(), "file", "GPU-f");
    std::fs::create_dir_all(file.pipe.parent().unwrap()).unwrap();
    std::fs::write(&file.pipe, "").unwrap();
    let out = file.run(&["-d"], "");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(stderr(&out).contains("Not a directory"), "{}", text(&out));
    if !nix::unistd::geteuid().is_root() {
        let ro = Mps::new(&node, dir.path(), "ro", "GPU-f");
        std::fs::create_dir_all(&ro.pipe).unwrap();
        std::fs::set_permissions(
            &ro.pipe,
            std::os::unix::fs::PermissionsExt::from_mode(0o555),
        )
        .unwrap();
        let out = ro.run(&["-d"], "");
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(
            stderr(&out).contains("cannot use pipe directory"),
            "{}",
            text(&out)
        );
    }
}

#[test]
fn binary_discovery_accepts_the_fake() {
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::create(dir.path()).unwrap();
    let bin = std::fs::read(node.mps_control_path()).unwrap();
    assert!(bin.starts_with(b"\x7fELF"));
    for roots in [common::as_host_root(&node), common::as_driver_root(&node)] {
        let files = driver_files::find(&roots, DRIVER_VERSION).unwrap();
        let mps: Vec<_> = files
            .binaries
            .iter()
            .filter(|b| b.destination == "/usr/bin/nvidia-cuda-mps-control")
            .collect();
        assert_eq!(mps.len(), 1, "{:?}", files.binaries);
        assert_eq!(mps[0].path, "/usr/bin/nvidia-cuda-mps-control");
        assert_eq!(mps[0].capability, Capability::Compute);
        assert!(
            files
                .binaries
                .iter()
                .any(|b| b.destination == "/usr/bin/nvidia-cuda-mps-server"),
            "{:?}",
            files.binaries
        );
        assert!(
            files
                .binaries
                .iter()
                .any(|b| b.destination == "/usr/bin/nvidia-smi"),
            "{:?}",
            files.binaries
        );
    }
}
