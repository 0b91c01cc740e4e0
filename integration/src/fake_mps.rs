//! Running MPS clients against the fake node's MPS stand-ins without a cluster: a process
//! with a /dev of its own (the fake GPU's nodes, which the fakes need as the real ones do,
//! and a tenancy's shared memory at /dev/shm), as the user a pod would run as.

use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// Where [`with_gpu_dev`] puts a pipe directory: a container gets it by a bind mount, so its
/// parents' modes do not matter, as they do not here.
pub const PIPE_IN_DEV: &str = "/dev/nvidia-mps";

/// Makes `cmd` run as `uid` in a mount namespace of its own whose /dev holds null, zero,
/// nvidiactl and nvidia0, `shm` (a host directory) at /dev/shm and `pipe` at
/// [`PIPE_IN_DEV`] when given. Needs root.
pub fn with_gpu_dev<'a>(
    cmd: &'a mut Command,
    uid: u32,
    shm: Option<&Path>,
    pipe: Option<&Path>,
) -> &'a mut Command {
    let c = |s: &[u8]| CString::new(s).unwrap_or_default();
    let nodes = [
        (c(b"/dev/null"), 1u32, 3u32),
        (c(b"/dev/zero"), 1, 5),
        (c(b"/dev/nvidiactl"), 195, 255),
        (c(b"/dev/nvidia0"), 195, 0),
    ];
    let binds: Vec<(CString, CString)> = [(shm, "/dev/shm"), (pipe, PIPE_IN_DEV)]
        .into_iter()
        .filter_map(|(src, to)| Some((c(src?.as_os_str().as_bytes()), c(to.as_bytes()))))
        .collect();
    // SAFETY: only unshare, mount, mknod, chmod, mkdir, setgroups, setgid and setuid run
    // between fork and exec, all async-signal-safe, on strings made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let ok = |r: libc::c_int| {
                if r == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            };
            let none = std::ptr::null::<libc::c_char>();
            ok(libc::unshare(libc::CLONE_NEWNS))?;
            ok(libc::mount(
                none,
                c"/".as_ptr(),
                none,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            ok(libc::mount(
                c"tmpfs".as_ptr(),
                c"/dev".as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                c"mode=0755".as_ptr().cast(),
            ))?;
            for (p, major, minor) in &nodes {
                ok(libc::mknod(
                    p.as_ptr(),
                    libc::S_IFCHR | 0o666,
                    libc::makedev(*major, *minor),
                ))?;
                ok(libc::chmod(p.as_ptr(), 0o666))?;
            }
            for (src, to) in &binds {
                ok(libc::mkdir(to.as_ptr(), 0o755))?;
                ok(libc::mount(
                    src.as_ptr(),
                    to.as_ptr(),
                    none,
                    libc::MS_BIND,
                    std::ptr::null(),
                ))?;
            }
            // After the mounts, which need root (Command::uid would come before them).
            if uid != 0 {
                ok(libc::setgroups(0, std::ptr::null()))?;
                ok(libc::setgid(uid))?;
                ok(libc::setuid(uid))?;
            }
            Ok(())
        });
    }
    cmd
}

/// A client of this process's UID by the fakes' protocol (integration/fake-nvml/
/// mps-common.h), connected to the server while the returned stream lives.
pub fn attach(pipe: &Path) -> anyhow::Result<UnixStream> {
    let mut control = UnixStream::connect(pipe.join("control"))?;
    control.write_all(b"graft-fake-mps-client\n")?;
    let mut answer = String::new();
    BufReader::new(&control).read_line(&mut answer)?;
    let pid = answer
        .trim()
        .strip_prefix("server ")
        .ok_or_else(|| anyhow::anyhow!("the daemon answered {answer:?}"))?
        .to_string();
    let mut server = UnixStream::connect(pipe.join(format!("mps-server-{pid}")))?;
    server.write_all(b"attach - -\n")?;
    let mut limits = String::new();
    BufReader::new(&server).read_line(&mut limits)?;
    anyhow::ensure!(
        limits.starts_with("limits "),
        "the server answered {limits:?}"
    );
    Ok(server)
}

/// Sends one command line to the daemon on `<pipe>/control` as any client of the socket
/// may (the fake's protocol: one command a connection); its answer.
pub fn send_control(pipe: &Path, line: &str) -> anyhow::Result<String> {
    let mut s = UnixStream::connect(pipe.join("control"))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    s.write_all(format!("{line}\n").as_bytes())?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut out = String::new();
    std::io::Read::read_to_string(&mut s, &mut out)?;
    Ok(out)
}
