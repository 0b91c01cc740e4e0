//! A tenant against the MPS daemon's sandbox and its pipe directory, without a cluster
//! (graft-mps as a child, the fake daemon; the harness of mps.rs): symlinks planted in the
//! pipe directory that lead to the host through /proc/1/root (the test runs in the host's
//! PID namespace, so /proc/1/root is the host's /), and a pipe directory filled or nested
//! deep as the tenant's uid. Needs root.

use crate::mps::{mounts_below, root, share, wait_for, Bed, GraftMps, Unmount};
use graft_driver::claims::setup_port::DeviceSetup;

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use graft_driver::mps::{self, privileges, Phase};
use graft_integration::fake_gpu::FakeNode;
use graft_integration::fake_mps::send_control;
use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

const PID_FILE: &str = "nvidia-cuda-mps-control.pid";
const SHARE: &str = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
/// Long enough for graft-mps's back-off after a tenant's repeated quits.
const RESTART: Duration = Duration::from_secs(90);

/// Waits for `f`; on time out fails with `what` and `context()` (the logs).
fn wait_long(what: &str, context: &dyn Fn() -> String, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < RESTART, "{what}\n{}", context());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `p` through a host process's /proc/<pid>/root: a way out of any mount namespace for a
/// process that may follow that link. The host's init's, or where this test may not
/// follow that one (a machine whose pid 1 holds a capability this test lacks), this
/// test's own, which is in the host's mount namespace too.
fn through_init(p: &Path) -> PathBuf {
    let init = PathBuf::from(format!("/proc/1/root{}", p.display()));
    if std::fs::symlink_metadata(&init).is_ok() {
        return init;
    }
    PathBuf::from(format!("/proc/{}/root{}", std::process::id(), p.display()))
}

fn open_dir(dir: &Path) -> OwnedFd {
    nix::fcntl::open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

/// Makes the calling thread (only: raw system calls, not glibc's process-wide wrappers)
/// the tenant's uid and gid, with no supplementary group.
fn become_tenant(uid: u32) {
    if uid == 0 {
        return;
    }
    // SAFETY: plain system calls with integer arguments and a null list.
    unsafe {
        assert_eq!(
            libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()),
            0
        );
        assert_eq!(libc::syscall(libc::SYS_setresgid, uid, uid, uid), 0);
        assert_eq!(libc::syscall(libc::SYS_setresuid, uid, uid, uid), 0);
    }
}

/// A socket on the host that a `control` link may name; counts the connections of other
/// processes than this one (graft-mps's control client).
struct Victim {
    path: PathBuf,
    hits: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Victim {
    fn listen(path: PathBuf) -> Victim {
        let listener = UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let (hits, stop) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (h, s) = (hits.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) if peer_pid(&conn) != std::process::id() as i32 => {
                        h.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(_) => {}
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Victim {
            path,
            hits,
            stop,
            thread: Some(thread),
        }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn peer_pid(conn: &std::os::unix::net::UnixStream) -> i32 {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt fills `cred`, whose size `len` gives, on a live socket.
    let r = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::addr_of_mut!(cred).cast(),
            &mut len,
        )
    };
    if r == 0 {
        cred.pid
    } else {
        0
    }
}

/// A tenant of `uid` planting `links` (name, target) in the pipe directory wherever they
/// are missing, as fast as it can, until `stop`; how many it planted.
fn planter(
    pipe: &Path,
    uid: u32,
    links: Vec<(&'static str, PathBuf)>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<usize> {
    // Opened as root: the tenant's pods have the directory itself mounted, not its parents.
    let dir = open_dir(pipe);
    std::thread::spawn(move || {
        become_tenant(uid);
        let mut planted = 0;
        while !stop.load(Ordering::SeqCst) {
            for (name, target) in &links {
                if nix::unistd::symlinkat(target, &dir, *name).is_ok() {
                    planted += 1;
                }
            }
            std::thread::yield_now();
        }
        planted
    })
}

/// The last Cap*/NoNewPrivs values the fake daemon logged, by name.
pub(crate) fn privileges_logged(log: &str) -> std::collections::BTreeMap<String, String> {
    log.lines()
        .filter_map(|l| l.split_once("] Privileges ")?.1.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// Ok when the daemon whose control log is `log` last ran with no_new_privs and exactly
/// the sandbox's capabilities (cluster_gpu's MPS test checks the chart's graft-mps so).
pub(crate) fn daemon_was_sandboxed(log: &str) -> anyhow::Result<()> {
    let held = privileges_logged(log);
    anyhow::ensure!(
        held.get("NoNewPrivs").map(String::as_str) == Some("1"),
        "the daemon ran without no_new_privs: {held:?}"
    );
    for set in ["CapBnd", "CapEff", "CapPrm", "CapInh", "CapAmb"] {
        let want = if matches!(set, "CapInh" | "CapAmb") {
            0
        } else {
            privileges::DAEMON.0
        };
        let got = held.get(set).and_then(|v| u64::from_str_radix(v, 16).ok());
        anyhow::ensure!(
            got == Some(want),
            "the daemon's {set} is {got:x?}, not {want:x}: {held:?}"
        );
    }
    Ok(())
}

#[test]
fn mps_pid_link_race_keeps_the_host_intact() {
    if !root() {
        return;
    }
    let bed = Bed::new();
    let _unmount = Unmount(bed.dir.path().to_path_buf());
    let graft_log = bed.dir.path().join("graft-mps.log");
    let graft_mps = GraftMps::start(&bed.state, &bed.node, &graft_log);
    let s = bed.setup();
    let a = bed.plan("a", &share(SHARE, "50", "1Gi"));
    s.apply(&a).unwrap().unwrap();
    let gpu = bed.paths();
    let t = gpu.tenancy(1);
    let pipe = t.pipe();
    let log = || FakeNode::mps_log(&t.log());
    let logs = || {
        let graft = std::fs::read_to_string(&graft_log).unwrap_or_default();
        format!("graft-mps:\n{graft}\ndaemon:\n{}", log())
    };
    let startups = || log().matches("Startup").count();
    let limited = || {
        log()
            .rsplit("Startup")
            .next()
            .is_some_and(|l| l.contains("set_default_active_thread_percentage 50"))
    };
    wait_for("the daemon never took its limits", limited);

    let victim = bed.dir.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let socket = Victim::listen(bed.dir.path().join("victim.sock"));

    // Tenants of uid 0 and 1000 plant the pid file as a link to the host while five quits
    // restart the daemon on an emptied directory. (`control` is not planted here: one
    // planted between the daemon's removal of a stale socket and its bind only fails the
    // start, and graft-mps's back-off would slow the test for nothing. Its link is planted
    // below, over the running daemon's socket.)
    let stop = Arc::new(AtomicBool::new(false));
    let links = vec![(PID_FILE, through_init(&victim))];
    let planters: Vec<_> = [0, 1000]
        .into_iter()
        .map(|uid| planter(&pipe, uid, links.clone(), stop.clone()))
        .collect();
    for round in 1..=5 {
        let control = pipe.join("control");
        wait_long("the daemon's socket never came back", &logs, || {
            std::fs::symlink_metadata(&control)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
        });
        let before = startups();
        assert_eq!(send_control(&pipe, "quit").unwrap(), "", "quit {round}");
        wait_long("graft-mps did not start the daemon again", &logs, || {
            startups() > before
        });
        wait_long("the restarted daemon never took its limits", &logs, limited);
    }
    stop.store(true, Ordering::SeqCst);
    let planted: usize = planters.into_iter().map(|p| p.join().unwrap()).sum();
    assert!(planted > 0, "the tenants never planted a link");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    assert_eq!(
        socket.hits(),
        0,
        "a root process connected to the host socket"
    );
    println!("{planted} links planted over five restarts");

    // A root tenant replaces the running daemon's `control` by a link to the host socket:
    // graft-mps's next resync runs its control client, which must not follow it.
    let dir = open_dir(&pipe);
    nix::unistd::symlinkat(&through_init(&socket.path), &dir, "planted").unwrap();
    nix::fcntl::renameat(&dir, "planted", &dir, "control").unwrap();
    let failures = || {
        std::fs::read_to_string(&graft_log)
            .unwrap_or_default()
            .matches("MPS tenancy not ready")
            .count()
    };
    let failed_before = failures();
    wait_for("graft-mps never used its control client", || {
        failures() > failed_before || socket.hits() > 0
    });
    assert_eq!(socket.hits(), 0, "the control client followed the link");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    // Every daemon ran with no capability to follow /proc/<pid>/root, and cannot regain one.
    daemon_was_sandboxed(&log()).unwrap();
    let held = privileges_logged(&log());
    let caps = |name: &str| u64::from_str_radix(&held[name], 16).unwrap();
    for set in ["CapBnd", "CapEff", "CapPrm"] {
        for cap in [
            privileges::cap::SYS_PTRACE,
            privileges::cap::SYS_ADMIN,
            privileges::cap::DAC_READ_SEARCH,
        ] {
            assert_eq!(caps(set) & (1 << cap), 0, "capability {cap} in {set}");
        }
    }

    s.undo(&a).unwrap();
    wait_long("the tenancy outlived its share", &logs, || !t.dir.exists());
    drop(graft_mps);
}

/// Free bytes and inodes of the file system holding `path`.
fn free(path: &Path) -> (u64, u64) {
    let st = nix::sys::statvfs::statvfs(path).unwrap();
    (
        st.blocks_available() as u64 * st.fragment_size() as u64,
        st.files_available() as u64,
    )
}

/// What a tenant of uid 1000 managed in the pipe directory.
#[derive(Debug)]
struct Filled {
    bytes: u64,
    write_error: Option<Errno>,
    files: u64,
    create_error: Option<Errno>,
}

fn fill_as_tenant(pipe: &Path) -> Filled {
    let dir = open_dir(pipe);
    std::thread::spawn(move || {
        become_tenant(1000);
        // 300 levels, each made from the last one's descriptor.
        let mut fd = dir.try_clone().unwrap();
        for _ in 0..300 {
            nix::sys::stat::mkdirat(&fd, "d", Mode::from_bits_truncate(0o755)).unwrap();
            fd = openat(
                &fd,
                "d",
                OFlag::O_RDONLY | OFlag::O_DIRECTORY,
                Mode::empty(),
            )
            .unwrap();
        }
        let create = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC;
        let big = openat(&dir, "big", create, Mode::from_bits_truncate(0o644)).unwrap();
        let chunk = vec![7u8; 1 << 20];
        let (mut bytes, mut write_error) = (0u64, None);
        while bytes < 512 << 20 {
            match nix::unistd::write(&big, &chunk) {
                Ok(n) => bytes += n as u64,
                Err(e) => {
                    write_error = Some(e);
                    break;
                }
            }
        }
        let (mut files, mut create_error) = (0u64, None);
        while files < 100_000 {
            let name = format!("f{files}");
            match openat(&dir, name.as_str(), create, Mode::from_bits_truncate(0o644)) {
                Ok(_) => files += 1,
                Err(e) => {
                    create_error = Some(e);
                    break;
                }
            }
        }
        Filled {
            bytes,
            write_error,
            files,
            create_error,
        }
    })
    .join()
    .unwrap()
}

#[test]
fn mps_pipe_directory_is_bounded() {
    if !root() {
        return;
    }
    let bed = Bed::new();
    let _unmount = Unmount(bed.dir.path().to_path_buf());
    // The state directory on a file system of its own: nothing else on the machine moves
    // its counts, and it is smaller than what the tenant writes.
    nix::mount::mount(
        Some("tmpfs"),
        &bed.state,
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        Some("size=256m,nr_inodes=60000,mode=0755"),
    )
    .unwrap();
    let graft_mps = GraftMps::start(&bed.state, &bed.node, &bed.dir.path().join("graft-mps.log"));
    let s = bed.setup();
    let a = bed.plan("a", &share(SHARE, "50", "1Gi"));
    s.apply(&a).unwrap().unwrap();
    let gpu = bed.paths();
    wait_for("the tenancy never became ready", || {
        mps::read_status(&gpu).is_some_and(|s| s.phase == Phase::Ready)
    });
    let t = gpu.tenancy(1);
    let before = free(&bed.state);
    let filled = fill_as_tenant(&t.pipe());
    let after = free(&bed.state);
    println!("the tenant's pipe directory took {filled:?}");
    assert_eq!(filled.write_error, Some(Errno::ENOSPC), "{filled:?}");
    assert!(filled.bytes <= 8 << 20, "{filled:?}");
    assert_eq!(filled.create_error, Some(Errno::ENOSPC), "{filled:?}");
    assert!(filled.files <= 8192, "{filled:?}");
    assert!(
        before.0.abs_diff(after.0) <= 1 << 20 && before.1.abs_diff(after.1) <= 64,
        "the state directory's file system went from {before:?} to {after:?} free"
    );

    // The last share goes: the tenancy goes, the 300 levels with it.
    s.undo(&a).unwrap();
    wait_for("the tenancy outlived its share", || !t.dir.exists());
    assert!(
        mounts_below(&gpu.dir).is_empty(),
        "{:?}",
        mounts_below(&gpu.dir)
    );
    drop(graft_mps);
}
