//! One MPS control daemon as graft-mps runs it: started in its sandbox as graft-mps's
//! child (in the foreground, so its pid is known without reading the pid file a tenant can
//! replace), told its limits through the driver's own client run inside the sandbox, and
//! stopped with its servers. Every wait is bounded: a tenant can break its daemon, never
//! graft-mps.

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::control;
use super::protocol::Protocol;
use super::sandbox::{self, Spec};

/// How long a control command may take (a tenant can make the daemon stop answering).
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(5);
/// What a control command's output may hold.
const OUTPUT_CAP: usize = 64 << 10;

/// Why a daemon could not be started or told something.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The pipe the sandbox reports its set-up steps through.
    #[error("pipe: {0}")]
    Pipe(#[source] nix::errno::Errno),
    /// The sandbox's command could not be prepared, or its namespace not found.
    #[error(transparent)]
    Sandbox(std::io::Error),
    /// The daemon could not be started.
    #[error("nvidia-cuda-mps-control -f in the driver root: {0}")]
    Spawn(#[source] std::io::Error),
    /// The sandbox's set-up failed at `step` (what the child reported before it failed).
    #[error("setting up the MPS daemon's sandbox ({step}): {source}")]
    SandboxStep {
        /// The step.
        step: String,
        /// What the child reported.
        #[source]
        source: std::io::Error,
    },
    /// The control client could not be started.
    #[error("running nvidia-cuda-mps-control in the sandbox: {0}")]
    Control(#[source] std::io::Error),
    /// The control client failed; `output` is its stderr and stdout.
    #[error("nvidia-cuda-mps-control ({status}): {output}")]
    Failed {
        /// How it exited.
        status: std::process::ExitStatus,
        /// Its stderr and stdout.
        output: String,
    },
    /// The control client did not answer in time.
    #[error("nvidia-cuda-mps-control did not answer within {timeout:?}", timeout = CONTROL_TIMEOUT)]
    Timeout,
    /// The daemon exited before it answered (`hint`: what may be wrong).
    #[error("the MPS control daemon exited as it started{hint}")]
    ExitedAtStart {
        /// What may be wrong, from the protocol asked for.
        hint: &'static str,
    },
    /// The daemon's answer could not be used.
    #[error("nvidia-cuda-mps-control answered {0:?}")]
    Answer(String),
}

/// Starts the daemon in its sandbox; returns its pid (also its process group).
pub fn start(spec: &Spec) -> Result<i32, DaemonError> {
    let (trace_r, trace_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
            .map_err(DaemonError::Pipe)?;
    let mut cmd = sandbox::daemon_command(spec, trace_w).map_err(DaemonError::Sandbox)?;
    let spawned = cmd.spawn();
    drop(cmd);
    match spawned {
        Ok(child) => Ok(child.id() as i32),
        Err(e) => {
            let mut step = [0u8; 64];
            let n = nix::unistd::read(trace_r.as_fd(), &mut step).unwrap_or(0);
            let step = String::from_utf8_lossy(&step[..n]).into_owned();
            Err(if step.is_empty() {
                DaemonError::Spawn(e)
            } else {
                DaemonError::SandboxStep { step, source: e }
            })
        }
    }
}

/// Whether `pid` (a child) has exited; it is left to be reaped.
pub fn exited(pid: i32) -> bool {
    !matches!(
        waitid(
            Id::Pid(Pid::from_raw(pid)),
            WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT
        ),
        Ok(WaitStatus::StillAlive)
    )
}

/// Collects an exited daemon, and first whatever is left of its process group (servers):
/// until it is collected its pid, and so the group id, cannot be reused.
pub fn collect(pid: i32) {
    let _ = kill(Pid::from_raw(-pid), Signal::SIGKILL);
    let _ = waitpid(Pid::from_raw(pid), None);
}

fn wait_exit(pid: i32, within: Duration) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if exited(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    exited(pid)
}

/// Stops the daemon: `quit` (`-q` under v3), then SIGTERM, then SIGKILL, its group with
/// it; collected.
pub fn stop(pid: i32, protocol: Protocol) {
    if !exited(pid) {
        let _ = match protocol {
            Protocol::Legacy => control(pid, "quit\n"),
            Protocol::V3 => control_args(pid, &["-q"]),
        };
        if !wait_exit(pid, Duration::from_secs(5)) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            if !wait_exit(pid, Duration::from_secs(2)) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                wait_exit(pid, Duration::from_secs(2));
            }
        }
    }
    collect(pid);
}

/// Sends `commands` (one a line) through `nvidia-cuda-mps-control` inside the sandbox of
/// daemon `pid`; its output when it succeeds.
pub fn control(pid: i32, commands: &str) -> Result<String, DaemonError> {
    run_control(pid, &[], commands)
}

/// Runs `nvidia-cuda-mps-control ARGS` (an MPS v3 command) inside the sandbox of daemon
/// `pid`; its output when it succeeds.
pub fn control_args(pid: i32, args: &[&str]) -> Result<String, DaemonError> {
    run_control(pid, args, "")
}

fn run_control(pid: i32, args: &[&str], commands: &str) -> Result<String, DaemonError> {
    let ns = control::namespace_of(pid).map_err(DaemonError::Sandbox)?;
    let mut child = control::control_command(ns)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(DaemonError::Control)?;
    if let Some(mut stdin) = child.stdin.take() {
        // Small: fits the pipe, never blocks.
        let _ = stdin.write_all(commands.as_bytes());
    }
    let deadline = Instant::now() + CONTROL_TIMEOUT;
    let out = read_until(child.stdout.take(), child.stderr.take(), deadline);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => break None,
        }
    };
    match (status, out) {
        (Some(s), (stdout, _)) if s.success() => Ok(stdout),
        (Some(status), (stdout, stderr)) => Err(DaemonError::Failed {
            status,
            output: format!("{stderr} {stdout}").trim().to_string(),
        }),
        (None, _) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(DaemonError::Timeout)
        }
    }
}

/// One of a child's output pipes being read.
struct Pipe {
    src: Box<dyn Read>,
    fd: i32,
    buf: Vec<u8>,
    done: bool,
}

/// Reads both pipes to their end, or until the deadline, keeping at most [`OUTPUT_CAP`]
/// bytes of each.
fn read_until(
    out: Option<std::process::ChildStdout>,
    err: Option<std::process::ChildStderr>,
    deadline: Instant,
) -> (String, String) {
    let pipe = |src: Box<dyn Read>, fd: i32| Pipe {
        src,
        fd,
        buf: Vec::new(),
        done: false,
    };
    let mut pipes: Vec<Pipe> = Vec::new();
    if let Some(o) = out {
        let fd = o.as_raw_fd();
        pipes.push(pipe(Box::new(o), fd));
    }
    if let Some(e) = err {
        let fd = e.as_raw_fd();
        pipes.push(pipe(Box::new(e), fd));
    }
    while pipes.iter().any(|p| !p.done) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let mut fds: Vec<libc::pollfd> = pipes
            .iter()
            .filter(|p| !p.done)
            .map(|p| libc::pollfd {
                fd: p.fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `fds` is a valid array of pollfd for the call's duration.
        let n = unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                left.as_millis().min(60_000) as i32,
            )
        };
        if n <= 0 {
            continue;
        }
        for f in fds.iter().filter(|f| f.revents != 0) {
            if let Some(p) = pipes.iter_mut().find(|p| p.fd == f.fd) {
                let mut buf = [0u8; 4096];
                match p.src.read(&mut buf) {
                    Ok(0) | Err(_) => p.done = true,
                    Ok(k) => {
                        let room = OUTPUT_CAP.saturating_sub(p.buf.len());
                        p.buf.extend_from_slice(&buf[..k.min(room)]);
                    }
                }
            }
        }
    }
    let mut it = pipes
        .into_iter()
        .map(|p| String::from_utf8_lossy(&p.buf).into_owned());
    (it.next().unwrap_or_default(), it.next().unwrap_or_default())
}

/// Runs `first` until the daemon answers, for up to `ready_within` while it is starting;
/// a daemon that exits meanwhile is reported as such.
pub(super) fn until_ready<T>(
    pid: i32,
    protocol: Protocol,
    ready_within: Duration,
    mut first: impl FnMut() -> Result<T, DaemonError>,
) -> Result<T, DaemonError> {
    let end = Instant::now() + ready_within;
    loop {
        match first() {
            Ok(v) => return Ok(v),
            Err(e) if e.to_string().contains("Cannot find") => {
                if exited(pid) {
                    return Err(DaemonError::ExitedAtStart {
                        hint: protocol.exit_hint(),
                    });
                }
                if Instant::now() >= end {
                    return Err(e);
                }
                std::thread::sleep(Duration::from_millis(50))
            }
            // A daemon that refused its arguments may still be exiting: that is the cause.
            Err(e) if wait_exit(pid, Duration::from_millis(500)) => {
                tracing::debug!(error = %e, "the MPS control daemon exited");
                return Err(DaemonError::ExitedAtStart {
                    hint: protocol.exit_hint(),
                });
            }
            Err(e) => return Err(e),
        }
    }
}

/// Sets the tenancy's limits: the defaults for servers started later, then the same for
/// each running server (new clients of it get them). Waits up to `ready_within` for a
/// daemon that is still starting to answer.
pub fn apply_limits(
    pid: i32,
    compute: u32,
    memory_mib: Option<u64>,
    ready_within: Duration,
) -> Result<(), DaemonError> {
    let mut defaults = format!("set_default_active_thread_percentage {compute}\n");
    if let Some(m) = memory_mib {
        defaults.push_str(&format!("set_default_device_pinned_mem_limit 0 {m}M\n"));
    }
    until_ready(pid, Protocol::Legacy, ready_within, || {
        control(pid, &defaults)
    })?;
    let listed = control(pid, "get_server_list\n")?;
    let mut each = String::new();
    for server in listed.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
        each.push_str(&format!(
            "set_active_thread_percentage {server} {compute}\n"
        ));
        if let Some(m) = memory_mib {
            each.push_str(&format!("set_device_pinned_mem_limit {server} 0 {m}M\n"));
        }
    }
    if !each.is_empty() {
        control(pid, &each)?;
    }
    Ok(())
}
