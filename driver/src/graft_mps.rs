//! `graft-mps`: runs the MPS control daemons of GPUs shared through MPS, one per GPU and
//! namespace (graft_driver::mps), outside graft-driver's pod so that they survive its
//! restarts and rollouts. It reads the shares graft-driver writes to the state directory
//! (on change and every second) and answers in each GPU's status file.
//!
//! It works in the host's mount namespace: the shared-memory tmpfs it mounts for a tenancy
//! must be where the container runtime resolves the tenants' bind mounts, and nodes' mounts
//! may not propagate. So the first thing it does, while it is still one thread, is enter
//! that namespace (`--enter-mount-ns`); from then on every path is a host path.

use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use graft_driver::mps::protocol::Protocol;
use graft_driver::mps::reconcile::{Config, Reconciler};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

#[derive(Parser, Debug)]
#[command(name = "graft-mps", version = graft_telemetry::VERSION, about = "graft's MPS control daemons")]
struct Args {
    /// graft's state directory, as a host path (graft-driver writes the shares there).
    #[arg(long, env = "GRAFT_STATE_DIR", default_value = graft_record::DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
    /// The NVIDIA driver's root as a host path; each daemon runs chrooted into it.
    #[arg(long, env = "GRAFT_NVIDIA_DRIVER_ROOT", default_value = "/")]
    nvidia_driver_root: PathBuf,
    /// Size of each tenancy's shared-memory tmpfs (the tenants' /dev/shm), a quantity such
    /// as 4Gi. Its pages are charged to the pods that write them.
    #[arg(long, env = "GRAFT_MPS_SHM_SIZE", default_value = "4Gi")]
    shm_size: String,
    /// The mount namespace to work in: `none` (this process's), `init` (/proc/1's),
    /// `parent` (the process that started this one: in a pod, the container runtime's
    /// shim, the namespace where it resolves containers' mounts), or a path.
    #[arg(long, env = "GRAFT_ENTER_MOUNT_NS", default_value = "none")]
    enter_mount_ns: String,
    /// The MPS control daemons' protocol: `2` (legacy, every driver: pods of several UIDs on
    /// one GPU take turns) or `3` (MPS v3, driver 615 or later: a server per UID, side by
    /// side; the daemons fail to start on older drivers).
    #[arg(long, env = "GRAFT_MPS_PROTOCOL", default_value = "2", value_parser = ["2", "3"])]
    mps_protocol: String,
    /// Where the host's /proc is, in the mount namespace worked in (the NVIDIA majors and a
    /// MIG device's capabilities are read there); tests point it at a fake node's, as
    /// graft-driver's.
    #[arg(long, env = "GRAFT_PROC_ROOT", hide = true, default_value = "/proc")]
    proc_root: std::path::PathBuf,
    /// How often to set every tenancy's limits again, in seconds.
    #[arg(long, env = "GRAFT_MPS_RESYNC_SECONDS", default_value_t = 30)]
    resync_seconds: u64,
    #[arg(long, env = "GRAFT_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: graft_telemetry::logs::LogFormat,
}

/// Enters the mount namespace `which` names; must run while this process has one thread.
fn enter_mount_ns(which: &str) -> anyhow::Result<()> {
    let path = match which {
        "none" => return Ok(()),
        "init" => "/proc/1/ns/mnt".to_string(),
        "parent" => format!("/proc/{}/ns/mnt", nix::unistd::getppid()),
        p if p.starts_with('/') => p.to_string(),
        other => bail!("--enter-mount-ns {other:?}: none, init, parent or a path"),
    };
    let fd = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
    nix::sched::setns(fd.as_fd(), nix::sched::CloneFlags::CLONE_NEWNS)
        .with_context(|| format!("entering the mount namespace {path}"))?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    enter_mount_ns(&args.enter_mount_ns)?;
    graft_runtime::private_umask();
    // Held until main returns: dropping it writes out the lines still buffered.
    let _logs = graft_runtime::init_logs(args.log_format, None)?;
    let shm_bytes = graft_driver::quantity::parse(&args.shm_size)
        .and_then(|b| u64::try_from(b).ok())
        .filter(|&b| b >= 1 << 20)
        .with_context(|| format!("--shm-size {:?}: a quantity of at least 1Mi", args.shm_size))?;
    // Orphaned MPS servers (a daemon killed first) come back to this process to be reaped.
    nix::sys::prctl::set_child_subreaper(true).context("PR_SET_CHILD_SUBREAPER")?;
    let stop = graft_runtime::stop_flag()?;
    let root = graft_driver::mps::root(&args.state_dir);
    graft_record::atomic::create_dir(&root).context("creating the MPS state directory")?;
    let inotify =
        Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).context("inotify_init")?;
    let mut r = Reconciler::new(Config {
        state_dir: args.state_dir.clone(),
        driver_root: args.nvidia_driver_root.clone(),
        shm_bytes,
        proc_root: args.proc_root.clone(),
        protocol: Protocol::parse(&args.mps_protocol).unwrap_or_default(),
    });
    tracing::info!(state = %args.state_dir.display(), driver_root = %args.nvidia_driver_root.display(), shm_bytes, protocol = %args.mps_protocol, "graft-mps started");
    let resync = Duration::from_secs(args.resync_seconds.max(1));
    let mut last_resync = Instant::now();
    let changes = AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_CLOSE_WRITE;
    while !stop.load(Ordering::SeqCst) {
        reap(&mut r);
        // Watches first, then the pass: a share written in between is not missed.
        let _ = inotify.add_watch(&root, changes | AddWatchFlags::IN_ONLYDIR);
        for gpu in r.gpu_dirs() {
            let _ = inotify.add_watch(&gpu.shares(), changes | AddWatchFlags::IN_ONLYDIR);
        }
        let full = last_resync.elapsed() >= resync;
        if full {
            last_resync = Instant::now();
        }
        r.pass(full);
        let mut pfd = libc::pollfd {
            fd: inotify.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the call's duration.
        if unsafe { libc::poll(&mut pfd, 1, 1000) } > 0 {
            while matches!(inotify.read_events(), Ok(ev) if !ev.is_empty()) {}
        }
    }
    tracing::info!("graft-mps stopping; its daemons stop with it");
    r.shutdown();
    Ok(())
}

/// Collects every exited child: daemons (their tenancy starts them again), orphaned
/// servers and anything else.
fn reap(r: &mut Reconciler) {
    use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag, WaitStatus};
    loop {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        let pid = match waitid(Id::All, flags) {
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(status) => match status.pid() {
                Some(pid) => pid,
                None => return,
            },
        };
        if !r.child_exited(pid.as_raw()) {
            let _ = waitpid(pid, None);
        }
    }
}
