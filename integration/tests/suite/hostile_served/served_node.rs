//! The node the served-entry attacks run on (containerd 2.2, runc and graft-nri with a
//! served root), and what they do as the unprivileged account.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Context};
use graft_integration::cri::Pod;
use graft_integration::mounts::Scratch;
use graft_integration::records::one_device_claim;
use graft_integration::{Containerd, Cri, GraftNri, Testbed, Version};
use graft_record::{ContainerEdits, Mount, RecordStore};

/// The unprivileged account the attacker runs as.
pub const NOBODY: u32 = 65534;

/// A scratch directory under /tmp for containerd (socket paths must stay short).
pub fn scratch(name: &str) -> anyhow::Result<Scratch> {
    Scratch::new(format!("/tmp/ghs-{name}-{}", std::process::id()))
}

/// A root-owned 0755 scratch directory outside any world-writable one, for served trees.
pub fn served_scratch(name: &str) -> anyhow::Result<Scratch> {
    let s = Scratch::new(format!("/run/ghs-{name}-{}", std::process::id()))?;
    std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o755))?;
    Ok(s)
}

pub fn set_mode(p: &Path, mode: u32) -> anyhow::Result<()> {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", p.display()))
}

/// Runs `f` on a thread of its own whose credentials (only its own: the raw system calls
/// act on the calling thread, unlike glibc's wrappers) are uid and gid 65534 with no
/// supplementary groups and, from that, no capabilities: an unprivileged host user.
pub fn as_nobody<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<anyhow::Result<T>> {
    std::thread::spawn(move || {
        // SAFETY: plain system calls on integers; they change only this thread's
        // credentials, which nothing else of the process reads.
        unsafe {
            ensure!(
                libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) == 0,
                "setgroups"
            );
            ensure!(
                libc::syscall(libc::SYS_setresgid, NOBODY, NOBODY, NOBODY) == 0,
                "setresgid"
            );
            ensure!(
                libc::syscall(libc::SYS_setresuid, NOBODY, NOBODY, NOBODY) == 0,
                "setresuid"
            );
        }
        Ok(f())
    })
}

/// containerd 2.2 with graft-nri allowing mounts from `roots` (and, given, a driver root).
pub struct Node {
    pub _cd: Containerd,
    pub _nri: GraftNri,
    pub cri: Arc<Cri>,
    pub store: Arc<RecordStore>,
}

pub async fn node(dir: &Path, roots: &str, driver_root: Option<&Path>) -> anyhow::Result<Node> {
    let tb = Testbed::load()?;
    let cd = Containerd::start(&tb, Version::V2_2, &dir.join("c"))?;
    let state = dir.join("state");
    let store = RecordStore::open(&state)?;
    let mut args = vec!["--allowed-mount-roots".to_string(), roots.to_string()];
    if let Some(r) = driver_root {
        args.extend([
            "--nvidia-driver-root".to_string(),
            r.to_string_lossy().into_owned(),
        ]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut nri = GraftNri::start(&cd.nri_socket, &state, &dir.join("graft-nri.log"), &args)?;
    nri.wait_synchronized(Duration::from_secs(60))?;
    let cri = Cri::connect(&cd.socket, &dir.join("pods")).await?;
    Ok(Node {
        _cd: cd,
        _nri: nri,
        cri: Arc::new(cri),
        store: Arc::new(store),
    })
}

pub fn bind(source: &str, destination: &str, rw: bool) -> Mount {
    Mount {
        source: source.into(),
        destination: destination.into(),
        kind: "bind".into(),
        options: ["bind", if rw { "rw" } else { "ro" }, "nosuid", "nodev"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
    }
}

/// What one container did with the entry it was given.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Seen {
    Refused,
    Real,
    Decoy,
    Other(String),
}

/// One pod whose record gives every container `c<i>` (i < n) a device with `edits`.
pub async fn pod_for(
    n: &Node,
    case: &str,
    count: usize,
    edits: ContainerEdits,
) -> anyhow::Result<Pod> {
    let uid = format!("{case}-{}", std::process::id());
    let names: Vec<String> = (0..count).map(|i| format!("c{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    n.store.put_claim(&one_device_claim(
        &format!("claim-{uid}"),
        &format!("served-{case}"),
        &uid,
        &refs,
        "seat",
        edits,
    ))?;
    n.cri.run_pod(case, &uid).await
}

/// Creates containers `c0..c<count>` of `pod`, `batch` at a time, each printing the file
/// at `/etc/app/seat` and exiting; tallies what each saw.
pub async fn run_all(n: &Node, pod: &Pod, count: usize, batch: usize) -> anyhow::Result<Vec<Seen>> {
    let mut seen = Vec::new();
    for start in (0..count).step_by(batch) {
        let mut tasks = Vec::new();
        for i in start..(start + batch).min(count) {
            let cri = n.cri.clone();
            let pod = pod.clone();
            tasks.push(tokio::spawn(async move {
                let name = format!("c{i}");
                let script = "echo \"SEAT $(cat /etc/app/seat 2>&1)\"; echo DONE";
                let id = match cri.create(&pod, &name, script).await {
                    Ok(id) => id,
                    Err(_) => return Ok::<Seen, anyhow::Error>(Seen::Refused),
                };
                if cri.start(&id).await.is_err() {
                    return Ok(Seen::Refused);
                }
                let log = cri
                    .wait_log(&pod, &name, "DONE", Duration::from_secs(60))
                    .await?;
                Ok(if log.contains("SEAT REAL") {
                    Seen::Real
                } else if log.contains("DECOY") {
                    Seen::Decoy
                } else {
                    Seen::Other(log)
                })
            }));
        }
        for t in tasks {
            seen.push(t.await??);
        }
    }
    Ok(seen)
}

pub fn tally(seen: &[Seen]) -> BTreeMap<String, usize> {
    let mut t = BTreeMap::new();
    for s in seen {
        let k = match s {
            Seen::Other(_) => "other".to_string(),
            s => format!("{s:?}").to_lowercase(),
        };
        *t.entry(k).or_default() += 1;
    }
    t
}

/// An unprivileged attacker swapping `dir/seat` and `dir/seat.swap` (a symlink to the
/// decoy) with `renameat2(RENAME_EXCHANGE)` until told to stop: (swaps done, refused).
pub fn swapper(
    dir: &Path,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<anyhow::Result<(u64, u64)>> {
    let a = CString::new(dir.join("seat").into_os_string().into_encoded_bytes()).unwrap();
    let b = CString::new(dir.join("seat.swap").into_os_string().into_encoded_bytes()).unwrap();
    let done = Arc::new(AtomicU64::new(0));
    as_nobody(move || {
        let mut refused = 0u64;
        while !stop.load(Ordering::Relaxed) {
            // SAFETY: two NUL-terminated paths that outlive the call.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_renameat2,
                    libc::AT_FDCWD,
                    a.as_ptr(),
                    libc::AT_FDCWD,
                    b.as_ptr(),
                    libc::RENAME_EXCHANGE,
                )
            };
            if r == 0 {
                done.fetch_add(1, Ordering::Relaxed);
            } else {
                refused += 1;
                // Refused: no point spinning a core the containers need.
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        (done.load(Ordering::Relaxed), refused)
    })
}
