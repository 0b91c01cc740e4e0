//! The sandbox an MPS control daemon runs in. It runs as root, and its pipe directory is
//! writable by the tenants (their clients create sockets there): a symlink or FIFO planted
//! as `nvidia-cuda-mps-control.pid` is followed by the daemon when it starts. So the daemon
//! gets a mount namespace of its own whose root is the driver root, read-only (it finds
//! nvidia-cuda-mps-server and the driver's libraries there, as in NVIDIA's own DRA driver,
//! which chroots into it); a fresh read-only /proc (and /sys when the root has one); a /dev
//! holding only null, zero, urandom, the GPU's NVIDIA nodes and the tenancy's shared memory
//! at /dev/shm; a private /tmp holding the pipe directory (/tmp/nvidia-mps) and the log
//! directory (/tmp/nvidia-log). The old root is detached (pivot_root). The directories
//! tenants write are mounted nosymfollow, so no symlink planted there is followed at all;
//! and the daemon keeps only the capabilities it needs, with no_new_privs
//! (super::privileges), so that even /proc/<pid>/root, which a process with every
//! capability could follow back to the host, stays closed.
//!
//! The set-up runs between fork and exec (the driver root's program must be exec'd inside
//! it, with the driver root's own loader and libraries), so it uses only system calls on
//! strings prepared before the fork. Control commands run the driver's client the same way
//! (super::control).

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use super::files::{TenancyPaths, CLIENT_PIPE_DIR};
use super::privileges;

/// The daemon's log directory inside the sandbox.
pub const SANDBOX_LOG_DIR: &str = "/tmp/nvidia-log";
/// PATH inside the sandbox: where driver roots keep their programs.
pub const SANDBOX_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The driver's MPS control program: the daemon with `-f`, the client without.
pub(super) const CONTROL: &str = "nvidia-cuda-mps-control";
/// The file the daemon writes its pid to, in its pipe directory.
const PID_FILE: &str = "nvidia-cuda-mps-control.pid";

/// A character device node the sandbox's /dev gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Its name under /dev.
    pub name: String,
    /// Its major number.
    pub major: u64,
    /// Its minor number.
    pub minor: u64,
}

/// What a daemon's sandbox is made of.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The driver root as a host path.
    pub driver_root: std::path::PathBuf,
    /// The tenancy's directories.
    pub tenancy: TenancyPaths,
    /// The GPU the daemon serves.
    pub gpu_uuid: String,
    /// The device nodes of its /dev.
    pub nodes: Vec<Node>,
    /// The protocol it is started with.
    pub protocol: super::protocol::Protocol,
}

fn c(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(std::io::Error::other)
}

/// A directory of the driver root the sandbox mounts over: it must be a real directory.
fn root_dir(root: &Path, name: &str) -> std::io::Result<Option<CString>> {
    let p = root.join(name);
    match std::fs::symlink_metadata(&p) {
        Ok(m) if m.is_dir() => Ok(Some(c(&p)?)),
        Ok(_) => Err(std::io::Error::other(format!(
            "{} is not a directory (the driver root needs one to run MPS)",
            p.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

struct Prepared {
    driver_root: CString,
    root: CString,
    proc: CString,
    sys: Option<CString>,
    dev: CString,
    dev_shm: CString,
    shm: CString,
    tmp: CString,
    tmp_pipe: CString,
    tmp_log: CString,
    pipe: CString,
    log: CString,
    pid_file: CString,
    pid_temp: CString,
    /// Directories below /dev the nodes are in (a MIG device's `nvidia-caps`).
    node_dirs: Vec<CString>,
    nodes: Vec<(CString, libc::dev_t)>,
}

/// The daemon (`nvidia-cuda-mps-control -f`, its own process group) set to start in its
/// sandbox. `trace` receives the name of the step that failed, if one does.
pub fn daemon_command(spec: &Spec, trace: OwnedFd) -> std::io::Result<Command> {
    let t = &spec.tenancy;
    let required = |name: &str| {
        root_dir(&spec.driver_root, name)?.ok_or_else(|| {
            std::io::Error::other(format!(
                "the driver root {} has no {name} directory",
                spec.driver_root.display()
            ))
        })
    };
    let root = c(&t.root())?;
    let in_root = |p: &str| CString::new([root.as_bytes(), p.as_bytes()].concat());
    let p = Prepared {
        driver_root: c(&spec.driver_root)?,
        proc: {
            required("proc")?;
            in_root("/proc")?
        },
        sys: root_dir(&spec.driver_root, "sys")?
            .map(|_| in_root("/sys"))
            .transpose()?,
        dev: {
            required("dev")?;
            in_root("/dev")?
        },
        dev_shm: in_root("/dev/shm")?,
        tmp: {
            required("tmp")?;
            in_root("/tmp")?
        },
        tmp_pipe: in_root(CLIENT_PIPE_DIR)?,
        tmp_log: in_root(SANDBOX_LOG_DIR)?,
        shm: c(&t.shm())?,
        pipe: c(&t.pipe())?,
        log: c(&t.log())?,
        pid_file: CString::new(format!("{CLIENT_PIPE_DIR}/{PID_FILE}"))?,
        pid_temp: CString::new(format!("{CLIENT_PIPE_DIR}/.graft-{PID_FILE}"))?,
        node_dirs: {
            let mut dirs: Vec<&str> = spec
                .nodes
                .iter()
                .filter_map(|n| n.name.rsplit_once('/').map(|(d, _)| d))
                .collect();
            dirs.sort_unstable();
            dirs.dedup();
            dirs.iter()
                .map(|d| in_root(&format!("/dev/{d}")))
                .collect::<Result<_, _>>()?
        },
        nodes: spec
            .nodes
            .iter()
            .map(|n| {
                let name = in_root(&format!("/dev/{}", n.name))?;
                Ok((name, libc::makedev(n.major as u32, n.minor as u32)))
            })
            .collect::<std::io::Result<_>>()?,
        root,
    };
    let mut cmd = Command::new(CONTROL);
    cmd.arg("-f")
        .args(spec.protocol.daemon_args())
        .env_clear()
        .env("PATH", SANDBOX_PATH)
        .env("HOME", "/")
        .env("CUDA_MPS_PIPE_DIRECTORY", CLIENT_PIPE_DIR)
        .env("CUDA_MPS_LOG_DIRECTORY", SANDBOX_LOG_DIR)
        .env("CUDA_VISIBLE_DEVICES", &spec.gpu_uuid)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .process_group(0);
    // SAFETY: `enter` makes only system calls (unshare, mount, statfs, mknod, mkdir, chmod,
    // chdir, pivot_root, umount2, umask, open, close, unlink, rename, prctl, capset,
    // write), all async-signal-safe, on strings prepared above and locals; it allocates
    // nothing.
    unsafe {
        cmd.pre_exec(move || {
            enter(&p).map_err(|(step, e)| {
                let _ = libc::write(trace.as_raw_fd(), step.as_ptr().cast(), step.len());
                e
            })
        });
    }
    Ok(cmd)
}

type Step = Result<(), (&'static str, std::io::Error)>;

fn check(step: &'static str, r: libc::c_int) -> Step {
    if r == 0 {
        Ok(())
    } else {
        Err((step, std::io::Error::last_os_error()))
    }
}

fn mount(
    step: &'static str,
    src: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> Step {
    let ptr = |s: Option<&CStr>| s.map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: every pointer is null or a NUL-terminated string that outlives the call.
    check(step, unsafe {
        libc::mount(
            ptr(src),
            target.as_ptr(),
            ptr(fstype),
            flags,
            ptr(data).cast(),
        )
    })
}

/// statfs's f_flags bit for a nosymfollow mount (linux/statfs.h; not in libc).
const ST_NOSYMFOLLOW: libc::c_long = 0x2000;

/// A bind mount of a directory the tenants write (pipe, shared memory) or the daemon's
/// servers do (log), made nosuid, nodev, noexec and nosymfollow: a symlink planted there is
/// never followed inside the sandbox (the daemon opening its pid file, the control client
/// connecting to `control`), so none leads to /proc/<pid>/root or anywhere else. Checked,
/// as a kernel that does not know the flag would ignore it.
fn bind_tenant_dir(step: &'static str, src: &CStr, target: &CStr) -> Step {
    use libc::{MS_BIND, MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_NOSYMFOLLOW, MS_REMOUNT};
    mount(step, Some(src), target, None, MS_BIND, None)?;
    let flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOSYMFOLLOW;
    mount(step, None, target, None, flags, None)?;
    // SAFETY: statfs fills the zeroed struct on the stack; `target` is NUL-terminated.
    let mut st: libc::statfs64 = unsafe { std::mem::zeroed() };
    check(step, unsafe { libc::statfs64(target.as_ptr(), &mut st) })?;
    if (st.f_flags as libc::c_long) & ST_NOSYMFOLLOW == 0 {
        return Err((step, std::io::Error::from_raw_os_error(libc::EINVAL)));
    }
    Ok(())
}

fn enter(p: &Prepared) -> Step {
    use libc::{MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_RDONLY};
    let small = c"mode=0755,size=65536";
    // SAFETY (all blocks below): plain system calls on NUL-terminated strings.
    check("umask", {
        unsafe { libc::umask(0o022) };
        0
    })?;
    check("unshare", unsafe { libc::unshare(libc::CLONE_NEWNS) })?;
    mount(
        "private /",
        None,
        c"/",
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )?;
    // The driver root's own file system only (not what is mounted below it, such as other
    // pods' volumes when it is the host's /), read-only.
    mount(
        "bind the driver root",
        Some(&p.driver_root),
        &p.root,
        None,
        libc::MS_BIND,
        None,
    )?;
    mount(
        "driver root read-only",
        None,
        &p.root,
        None,
        libc::MS_BIND | libc::MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
        None,
    )?;
    let ro_kernel = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
    mount(
        "proc",
        Some(c"proc"),
        &p.proc,
        Some(c"proc"),
        ro_kernel,
        None,
    )?;
    if let Some(sys) = &p.sys {
        mount(
            "sysfs",
            Some(c"sysfs"),
            sys,
            Some(c"sysfs"),
            ro_kernel,
            None,
        )?;
    }
    mount(
        "/dev",
        Some(c"tmpfs"),
        &p.dev,
        Some(c"tmpfs"),
        MS_NOSUID | MS_NOEXEC,
        Some(small),
    )?;
    for dir in &p.node_dirs {
        // SAFETY: a NUL-terminated path made before fork; mkdir is async-signal-safe.
        check("mkdir /dev/<dir>", unsafe {
            libc::mkdir(dir.as_ptr(), 0o755)
        })?;
    }
    for (name, dev) in &p.nodes {
        check("mknod", unsafe {
            libc::mknod(name.as_ptr(), libc::S_IFCHR | 0o666, *dev)
        })?;
        check("chmod", unsafe { libc::chmod(name.as_ptr(), 0o666) })?;
    }
    check("mkdir /dev/shm", unsafe {
        libc::mkdir(p.dev_shm.as_ptr(), 0o755)
    })?;
    bind_tenant_dir("/dev/shm", &p.shm, &p.dev_shm)?;
    mount(
        "/dev read-only",
        None,
        &p.dev,
        None,
        libc::MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
        Some(small),
    )?;
    mount(
        "/tmp",
        Some(c"tmpfs"),
        &p.tmp,
        Some(c"tmpfs"),
        MS_NOSUID | MS_NODEV | MS_NOEXEC,
        Some(small),
    )?;
    check("mkdir pipe", unsafe {
        libc::mkdir(p.tmp_pipe.as_ptr(), 0o755)
    })?;
    check("mkdir log", unsafe {
        libc::mkdir(p.tmp_log.as_ptr(), 0o700)
    })?;
    bind_tenant_dir("pipe directory", &p.pipe, &p.tmp_pipe)?;
    bind_tenant_dir("log directory", &p.log, &p.tmp_log)?;
    mount(
        "/tmp read-only",
        None,
        &p.tmp,
        None,
        libc::MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
        Some(small),
    )?;
    check("chdir root", unsafe { libc::chdir(p.root.as_ptr()) })?;
    // pivot_root(".", "."), then detaching the old root stacked below: no directory for it
    // is needed in the read-only root.
    check("pivot_root", unsafe {
        libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) as libc::c_int
    })?;
    check("detach the old root", unsafe {
        libc::umount2(c".".as_ptr(), libc::MNT_DETACH)
    })?;
    check("chdir /", unsafe { libc::chdir(c"/".as_ptr()) })?;
    own_pid_file(&p.pid_file, &p.pid_temp);
    privileges::restrict(privileges::DAEMON)
}

/// Leaves a regular file of root's as the daemon's pid file, put in place by a rename
/// that replaces at once whatever a tenant planted there since graft-mps emptied the
/// directory: a tenant of another uid cannot replace it in the sticky directory, so its
/// symlink (never followed here, but the daemon would fail on it) does not keep the daemon
/// down. Best effort: a daemon that still finds something else there fails, and is started
/// again.
fn own_pid_file(pid_file: &CStr, temp: &CStr) {
    use libc::{O_CLOEXEC, O_CREAT, O_EXCL, O_NOFOLLOW, O_WRONLY};
    for _ in 0..8 {
        // SAFETY: open, close, unlink and rename on NUL-terminated paths prepared before
        // the fork.
        let fd = unsafe {
            libc::open(
                temp.as_ptr(),
                O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                0o644,
            )
        };
        if fd < 0 {
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST)
                || unsafe { libc::unlink(temp.as_ptr()) } != 0
            {
                return;
            }
            continue;
        }
        unsafe { libc::close(fd) };
        unsafe { libc::rename(temp.as_ptr(), pid_file.as_ptr()) };
        return;
    }
}
