//! What an MPS program keeps of root's privileges once it is in its sandbox. graft-mps runs
//! privileged in the host's PID namespace, so a process it starts as root could follow
//! `/proc/<pid>/root` out of any mount namespace (the kernel lets it while it holds every
//! capability the target holds, or CAP_SYS_PTRACE) and undo what the sandbox hides. So
//! between fork and exec, after the sandbox is set up: no_new_privs, the capability
//! bounding set cut down to what the program needs (an exec as root gets exactly the
//! bounding set), no inheritable or ambient capability, and the process's own sets the
//! same.
//!
//! Everything here runs in a forked child: system calls only, nothing allocated.

/// A set of capabilities, bit N for capability N (linux/capability.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps(pub u64);

/// CAP_CHOWN, CAP_DAC_OVERRIDE, ... as numbered in linux/capability.h.
pub mod cap {
    /// Change a file's owner.
    pub const CHOWN: u32 = 0;
    /// Bypass file permission checks.
    pub const DAC_OVERRIDE: u32 = 1;
    /// Bypass read and search checks, open_by_handle_at.
    pub const DAC_READ_SEARCH: u32 = 2;
    /// Act as any file's owner.
    pub const FOWNER: u32 = 3;
    /// Signal any process.
    pub const KILL: u32 = 5;
    /// Change group ids.
    pub const SETGID: u32 = 6;
    /// Change user ids.
    pub const SETUID: u32 = 7;
    /// ptrace and /proc/<pid>/root of any process.
    pub const SYS_PTRACE: u32 = 19;
    /// Mounts, namespaces and much more.
    pub const SYS_ADMIN: u32 = 21;
}

const fn bit(c: u32) -> u64 {
    1 << c
}

/// What NVIDIA's MPS control daemon keeps. It runs as root to start each client's server
/// as that client's user (the man page: "the control daemon launches an MPS server with
/// the same user id (UID) as that of the requesting client process"), and manages those
/// servers and the files they and it share in the pipe and log directories:
/// - SETUID, SETGID: becoming the client's uid and gid (and dropping supplementary groups)
///   before it runs the server;
/// - KILL: stopping servers of other uids (`quit`, a server of another user draining);
/// - CHOWN, FOWNER, DAC_OVERRIDE: the sockets, pipes and logs of servers of other uids in
///   the pipe and log directories (the pipe directory is sticky and tenant-owned files lie
///   there; the log directory is root's and servers log into it).
///
/// Dropped, with every other: SYS_PTRACE (the escape through /proc/<pid>/root), SYS_ADMIN
/// (mounts, namespaces), DAC_READ_SEARCH (open_by_handle_at reaches any host file).
/// Servers run as root (for a root client) keep no more than these; those of other users
/// run with none, as MPS servers normally do.
pub const DAEMON: Caps = Caps(
    bit(cap::SETUID)
        | bit(cap::SETGID)
        | bit(cap::KILL)
        | bit(cap::CHOWN)
        | bit(cap::FOWNER)
        | bit(cap::DAC_OVERRIDE),
);

/// What the control client keeps: nothing (it only connects to the daemon's socket, which
/// root's own uid may).
pub const CLIENT: Caps = Caps(0);

/// linux/capability.h: _LINUX_CAPABILITY_VERSION_3, 64-bit sets in two 32-bit halves.
const VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

type Step = Result<(), (&'static str, std::io::Error)>;

fn check(step: &'static str, r: libc::c_long) -> Step {
    if r == 0 {
        Ok(())
    } else {
        Err((step, std::io::Error::last_os_error()))
    }
}

/// Sets no_new_privs and leaves the calling process `keep` and nothing else: bounding,
/// permitted and effective sets `keep`, inheritable and ambient sets empty. Needs
/// CAP_SETPCAP (dropping from the bounding set), so it comes after every step that needs
/// another capability.
pub fn restrict(keep: Caps) -> Step {
    // prctl is variadic and the kernel reads whole words: every argument is one.
    let (zero, one): (libc::c_ulong, libc::c_ulong) = (0, 1);
    // SAFETY (all blocks below): prctl and capset with integer arguments and pointers to
    // locals that outlive the calls.
    check("no_new_privs", unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, one, zero, zero, zero).into()
    })?;
    for c in 0..64u32 {
        if keep.0 & bit(c) != 0 {
            continue;
        }
        if unsafe {
            libc::prctl(
                libc::PR_CAPBSET_DROP,
                libc::c_ulong::from(c),
                zero,
                zero,
                zero,
            )
        } != 0
        {
            let e = std::io::Error::last_os_error();
            // EINVAL: past the kernel's last capability, none left to drop.
            if e.raw_os_error() == Some(libc::EINVAL) && c > cap::SYS_ADMIN {
                break;
            }
            return Err(("drop a bounding capability", e));
        }
    }
    check("clear the ambient capabilities", unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            zero,
            zero,
            zero,
        )
        .into()
    })?;
    let mut header = CapHeader {
        version: VERSION_3,
        pid: 0,
    };
    let half = |shift: u32| CapData {
        effective: (keep.0 >> shift) as u32,
        permitted: (keep.0 >> shift) as u32,
        inheritable: 0,
    };
    let data = [half(0), half(32)];
    check("capset", unsafe {
        libc::syscall(
            libc::SYS_capset,
            std::ptr::addr_of_mut!(header),
            data.as_ptr(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemon_keeps_no_way_out() {
        for c in [cap::SYS_PTRACE, cap::SYS_ADMIN, cap::DAC_READ_SEARCH] {
            assert_eq!(DAEMON.0 & bit(c), 0, "capability {c}");
        }
        assert_eq!(DAEMON.0.count_ones(), 6);
        assert_eq!(CLIENT.0, 0);
    }

    #[test]
    fn a_child_is_left_what_it_keeps() {
        use std::os::unix::process::CommandExt;
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let mut cmd = std::process::Command::new("/bin/cat");
        cmd.arg("/proc/self/status");
        // SAFETY: `restrict` makes only prctl and capset calls and allocates nothing.
        unsafe {
            cmd.pre_exec(|| restrict(DAEMON).map_err(|(_, e)| e));
        }
        let out = String::from_utf8(cmd.output().unwrap().stdout).unwrap();
        let field = |name: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
                .unwrap()
        };
        let hex = |name: &str| u64::from_str_radix(&field(name), 16).unwrap();
        assert_eq!(field("NoNewPrivs:"), "1");
        for name in ["CapBnd:", "CapEff:", "CapPrm:"] {
            assert_eq!(hex(name), DAEMON.0, "{name}");
        }
        assert_eq!(hex("CapInh:"), 0);
        assert_eq!(hex("CapAmb:"), 0);
    }
}
