//! Test helpers: a root beside a decoy tree, snapshots of the decoy, a private mount
//! namespace, syscalls denied with seccomp, and tests re-run in a child process.

use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A temporary directory holding `root/` (the container's) and `decoy/` (the host files an
/// escape would touch).
pub struct Fixture {
    _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub decoy: PathBuf,
}

/// What a test mounted below the fixture (in a private namespace: this thread's mount
/// table) is detached first, or the directory could not be removed.
impl Drop for Fixture {
    fn drop(&mut self) {
        let prefix = format!("{}/", self._tmp.path().display());
        let table = std::fs::read_to_string("/proc/thread-self/mountinfo").unwrap_or_default();
        let mut points: Vec<&str> = table
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|p| p.starts_with(&prefix))
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in points {
            let _ = nix::mount::umount2(p, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

impl Fixture {
    pub fn new() -> Fixture {
        let tmp = tempfile::Builder::new()
            .prefix("graft-hook-test")
            .tempdir_in("/tmp")
            .unwrap();
        let root = tmp.path().join("root");
        let decoy = tmp.path().join("decoy");
        std::fs::create_dir_all(&root).unwrap();
        for (p, text) in [
            ("etc/ld.so.conf", "decoy etc ld.so.conf\n"),
            ("etc/ld.so.conf.d/decoy.conf", "/decoy/lib\n"),
            ("ld.so.conf", "decoy top ld.so.conf\n"),
            ("lib/libdecoy.so", "decoy library"),
            ("proc/driver/nvidia/params", "ModifyDeviceFiles: 1\n"),
        ] {
            let at = decoy.join(p);
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(at, text).unwrap();
        }
        symlink("decoy-target", decoy.join("lib/libcuda.so.1")).unwrap();
        Fixture {
            _tmp: tmp,
            root,
            decoy,
        }
    }

    /// The decoy's host path without its leading `/`: where an absolute symlink to it
    /// leads inside the root.
    pub fn d(&self) -> String {
        self.decoy
            .to_str()
            .unwrap()
            .trim_start_matches('/')
            .to_string()
    }

    /// `p` with `{D}` replaced by [`Fixture::d`], under the root. A leading `/` is
    /// dropped: `Path::join` with an absolute path would leave the root.
    pub fn in_root(&self, p: &str) -> PathBuf {
        self.root
            .join(p.replace("{D}", &self.d()).trim_start_matches('/'))
    }

    /// A symlink at `at` (under the root) to `target` (`{D}` replaced by the decoy's path,
    /// so `/{D}` is absolute and `../../{D}` relative).
    pub fn link(&self, at: &str, target: &str) {
        let at = self.in_root(at);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        symlink(target.replace("{D}", &self.d()), at).unwrap();
    }

    pub fn mkdir(&self, p: &str) {
        std::fs::create_dir_all(self.in_root(p)).unwrap();
    }

    pub fn write(&self, p: &str, text: &str) {
        let at = self.in_root(p);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(at, text).unwrap();
    }

    pub fn decoy_snapshot(&self) -> BTreeMap<PathBuf, String> {
        snapshot(&self.decoy)
    }
}

/// Every entry below `dir`: type, mode, and contents or symlink target.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let mode = m.permissions().mode();
            let what = if m.file_type().is_symlink() {
                format!("link {:?}", std::fs::read_link(&p).unwrap())
            } else if m.is_dir() {
                todo.push(p.clone());
                "dir".to_string()
            } else if m.is_file() {
                format!("file {:?}", std::fs::read(&p).unwrap())
            } else {
                // A FIFO or device: never opened.
                format!("special {:?}", m.file_type())
            };
            out.insert(
                p.strip_prefix(dir).unwrap().to_path_buf(),
                format!("{mode:o} {what}"),
            );
        }
    }
    out
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Runs `f` on a thread of its own mount namespace, with every mount private, so nothing
/// it mounts reaches the host's mount table; the namespace goes with the thread. Threads
/// `f` starts share it. `None` (with the reason printed) when that cannot be had.
pub fn in_private_mount_ns<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> Option<R> {
    if !is_root() {
        eprintln!("skipped: needs root for a private mount namespace");
        return None;
    }
    std::thread::spawn(move || {
        // CLONE_NEWNS on this thread only.
        if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS) {
            eprintln!("skipped: unshare(CLONE_NEWNS): {e}");
            return None;
        }
        let flags = nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_PRIVATE;
        nix::mount::mount(None::<&str>, "/", None::<&str>, flags, None::<&str>).unwrap();
        Some(f())
    })
    .join()
    .unwrap()
}

/// Makes the listed syscalls fail with ENOSYS on this thread and the threads it starts
/// afterwards: a kernel without them, as far as the code under test can tell.
pub fn deny_syscalls(nrs: &[libc::c_long]) {
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    let ins = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let n = nrs.len() as u8;
    let mut prog = vec![ins(LD_W_ABS, 0, 0, 0)]; // seccomp_data.nr
    for (i, nr) in nrs.iter().enumerate() {
        prog.push(ins(JEQ_K, n - i as u8, 0, *nr as u32));
    }
    prog.push(ins(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW));
    prog.push(ins(
        RET_K,
        0,
        0,
        libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
    ));
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // No new privileges first, as an unprivileged filter requires.
    nix::sys::prctl::set_no_new_privs().unwrap();
    // SAFETY: prctl reads the filter program while `prog` and `fprog` are alive; nix has
    // no wrapper for PR_SET_SECCOMP.
    unsafe {
        let rc = libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &fprog as *const libc::sock_fprog,
        );
        assert_eq!(rc, 0, "seccomp: {}", std::io::Error::last_os_error());
    }
}

pub const CHILD_ENV: &str = "GRAFT_HOOK_TEST_CHILD";

/// Whether this is the child that [`run_child`] started.
pub fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// Runs the ignored test `name` alone in a fresh process of this test binary, so that
/// what it changes for the whole process (pathrs remembers a failed openat2) stays there.
pub fn run_child(name: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(out.status.success(), "{name} failed in the child");
    assert!(text.contains("1 passed"), "{name} did not run in the child");
}

/// A minimal 64-bit ELF shared object of this machine: one loaded segment holding a
/// dynamic section whose `DT_SONAME` is `soname` (none when `None`).
pub fn fake_elf(soname: Option<&str>) -> Vec<u8> {
    let machine: u16 = if cfg!(target_arch = "aarch64") {
        183
    } else {
        62
    };
    let (phoff, dynoff) = (64u64, 64 + 2 * 56u64);
    let stroff = dynoff + 4 * 16;
    let mut strtab = b"\0".to_vec();
    strtab.extend_from_slice(soname.unwrap_or("").as_bytes());
    strtab.push(0);
    let total = stroff + strtab.len() as u64;
    let mut e = b"\x7fELF\x02\x01\x01".to_vec();
    e.resize(16, 0);
    e.extend_from_slice(&3u16.to_ne_bytes()); // ET_DYN
    e.extend_from_slice(&machine.to_ne_bytes());
    e.extend_from_slice(&1u32.to_ne_bytes());
    e.extend_from_slice(&0u64.to_ne_bytes()); // entry
    e.extend_from_slice(&phoff.to_ne_bytes());
    e.extend_from_slice(&0u64.to_ne_bytes()); // shoff
    e.extend_from_slice(&0u32.to_ne_bytes()); // flags
    for v in [64u16, 56, 2, 64, 0, 0] {
        e.extend_from_slice(&v.to_ne_bytes());
    }
    // PT_LOAD of the whole file at address 0x1000, then PT_DYNAMIC.
    for (kind, off, vaddr, size) in [(1u32, 0, 0x1000, total), (2, dynoff, 0x1000 + dynoff, 64)] {
        e.extend_from_slice(&kind.to_ne_bytes());
        e.extend_from_slice(&4u32.to_ne_bytes());
        for v in [off, vaddr, vaddr, size, size, 8] {
            e.extend_from_slice(&v.to_ne_bytes());
        }
    }
    let soname_tag = if soname.is_some() { 14u64 } else { 1 }; // DT_SONAME or DT_NEEDED
    for (tag, val) in [
        (5u64, 0x1000 + stroff),
        (10, strtab.len() as u64),
        (soname_tag, 1),
        (0, 0),
    ] {
        e.extend_from_slice(&tag.to_ne_bytes());
        e.extend_from_slice(&val.to_ne_bytes());
    }
    e.extend_from_slice(&strtab);
    e
}
