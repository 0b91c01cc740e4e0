//! Attacks on what the files backend serves and on the NVIDIA driver's sockets, through real
//! containerd 2.2 and runc: a served directory another account can write, an unprivileged
//! process swapping a served entry for a symlink to a host decoy while 200 containers are
//! created, a setuid binary planted through a read-write entry, and the persistenced socket
//! swapped for a symlink. No container may see the decoy, and no host user may gain from
//! what a container planted.
//!
//! Needs root and the testbed; the README's test command provides them. The served trees
//! live under /run (root's, 0755): /tmp is world-writable, so nothing below it is served.

mod common;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_driver::discovery::files::{FilesDiscovery, RefusedDirs};
use graft_driver::discovery::Discovery;
use graft_integration::cri::Pod;
use graft_integration::fake_gpu::FakeNode;
use graft_integration::mounts::Scratch;
use graft_integration::records::one_device_claim;
use graft_integration::testbed::static_hook;
use graft_integration::{Containerd, Cri, GraftNri, Testbed, Version};
use graft_record::{ContainerEdits, Mount, RecordStore};

/// The unprivileged account the attacker runs as.
const NOBODY: u32 = 65534;

/// A scratch directory under /tmp for containerd (socket paths must stay short).
fn scratch(name: &str) -> anyhow::Result<Scratch> {
    Scratch::new(format!("/tmp/ghs-{name}-{}", std::process::id()))
}

/// A root-owned 0755 scratch directory outside any world-writable one, for served trees.
fn served_scratch(name: &str) -> anyhow::Result<Scratch> {
    let s = Scratch::new(format!("/run/ghs-{name}-{}", std::process::id()))?;
    std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o755))?;
    Ok(s)
}

fn set_mode(p: &Path, mode: u32) -> anyhow::Result<()> {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", p.display()))
}

/// Runs `f` on a thread of its own whose credentials (only its own: the raw system calls
/// act on the calling thread, unlike glibc's wrappers) are uid and gid 65534 with no
/// supplementary groups and, from that, no capabilities: an unprivileged host user.
fn as_nobody<T: Send + 'static>(
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
struct Node {
    _cd: Containerd,
    _nri: GraftNri,
    cri: Arc<Cri>,
    store: Arc<RecordStore>,
}

async fn node(dir: &Path, roots: &str, driver_root: Option<&Path>) -> anyhow::Result<Node> {
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

fn bind(source: &str, destination: &str, rw: bool) -> Mount {
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
enum Seen {
    Refused,
    Real,
    Decoy,
    Other(String),
}

/// One pod whose record gives every container `c<i>` (i < n) a device with `edits`.
async fn pod_for(n: &Node, case: &str, count: usize, edits: ContainerEdits) -> anyhow::Result<Pod> {
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
async fn run_all(n: &Node, pod: &Pod, count: usize, batch: usize) -> anyhow::Result<Vec<Seen>> {
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

fn tally(seen: &[Seen]) -> BTreeMap<String, usize> {
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
fn swapper(
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

/// A served directory another account could change is refused whole by discovery: owned
/// by nobody, world-writable, or sticky (/tmp-style), or below such a directory. The log
/// and the gauge say so, naming the path, owner and mode.
#[test]
fn a_served_directory_writable_by_nobody_is_refused() -> anyhow::Result<()> {
    let top = served_scratch("dirs")?;
    let lic = top.join("srv/lic");
    std::fs::create_dir_all(&lic)?;
    set_mode(&top.join("srv"), 0o755)?;
    std::fs::write(lic.join("seat-a.lic"), "a")?;
    let config = top.join("devices.toml");
    std::fs::write(
        &config,
        format!(
            "[[files]]\ndir = \"{}\"\nattributes = {{ type = \"licence\" }}\n",
            lic.display()
        ),
    )?;
    // The gauge (graft_driver_served_dirs_refused) counts what `refused` lists.
    let files = FilesDiscovery::new(config, "/".into(), &[top.to_string_lossy().into_owned()])?
        .with_refusals(RefusedDirs::default());
    ensure!(
        files.discover()?.len() == 1,
        "the root-owned directory is served"
    );
    let mut tried = 0;
    for (at, owner, mode) in [
        (&lic, NOBODY, 0o755),
        (&lic, 0, 0o777),
        (&lic, 0, 0o1777),
        (&lic, 0, 0o775),
        (&top.join("srv"), NOBODY, 0o755),
    ] {
        tried += 1;
        std::os::unix::fs::chown(at, Some(owner), None)?;
        set_mode(at, mode)?;
        let devices = files.discover()?;
        let refused = files.refused();
        let key = lic.to_string_lossy().into_owned();
        let reason = refused.get(&key).map(String::as_str).unwrap_or("");
        ensure!(
            devices.is_empty()
                && refused.len() == 1
                && reason.contains(&format!("uid {owner} with mode {mode:04o}"))
                && reason.contains(&*at.to_string_lossy()),
            "{} uid {owner} mode {mode:o}: served {} devices, reason {reason:?}",
            at.display(),
            devices.len(),
        );
        std::os::unix::fs::chown(at, Some(0), None)?;
        set_mode(at, 0o755)?;
    }
    ensure!(files.discover()?.len() == 1 && files.refused().is_empty());
    println!("{tried} directories another account could change, all refused");
    Ok(())
}

/// 200 containers given a served entry while an unprivileged process swaps it, in a loop,
/// with a symlink to a host decoy (`renameat2(RENAME_EXCHANGE)`). Where the attacker owns
/// the served directory, graft-nri refuses every container (the directory is not root's);
/// in a root-owned one the attacker cannot swap at all, and every container gets the real
/// entry. No container sees the decoy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_a_served_entry_never_hands_out_the_decoy() -> anyhow::Result<()> {
    const PER_PHASE: usize = 100;
    let dir = scratch("swap")?;
    let top = served_scratch("swap")?;
    let decoy = top.join("decoy/secret");
    std::fs::create_dir_all(decoy.parent().context("parent")?)?;
    std::fs::write(&decoy, "DECOY")?;
    let srv = top.join("srv");
    let n = node(&dir, &srv.to_string_lossy(), None).await?;
    let started = Instant::now();
    let mut all = Vec::new();
    let mut report = Vec::new();
    for (case, owner) in [("theirs", NOBODY), ("roots", 0)] {
        let d = srv.join(case);
        std::fs::create_dir_all(&d)?;
        std::fs::write(d.join("seat"), "REAL")?;
        std::os::unix::fs::symlink(&decoy, d.join("seat.swap"))?;
        std::os::unix::fs::chown(&d, Some(owner), Some(owner))?;
        set_mode(&d, 0o755)?;
        let source = d.join("seat").to_string_lossy().into_owned();
        let edits = ContainerEdits {
            mounts: vec![bind(&source, "/etc/app/seat", false)],
            ..Default::default()
        };
        let pod = pod_for(&n, case, PER_PHASE, edits).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let attacker = swapper(&d, stop.clone());
        let seen = run_all(&n, &pod, PER_PHASE, 10).await;
        stop.store(true, Ordering::Relaxed);
        let (swaps, denied) = attacker
            .join()
            .map_err(|_| anyhow::anyhow!("attacker panicked"))??;
        let seen = seen?;
        n.cri.remove_pod(&pod).await?;
        let t = tally(&seen);
        report.push(format!("{case}: {t:?}, {swaps} swaps, {denied} refused"));
        match owner {
            0 => ensure!(
                swaps == 0 && t.get("real") == Some(&PER_PHASE),
                "root's directory: {t:?} after {swaps} swaps"
            ),
            _ => ensure!(swaps > 0, "the attacker never swapped its own directory"),
        }
        if let Some(other) = seen.iter().find(|s| matches!(s, Seen::Other(_))) {
            anyhow::bail!("{case}: a container saw neither: {other:?}");
        }
        all.extend(seen);
    }
    let decoys = all.iter().filter(|s| **s == Seen::Decoy).count();
    ensure!(
        decoys == 0,
        "{decoys} of {} containers saw the decoy: {report:?}",
        all.len()
    );
    println!(
        "{} containers in {:?}, none saw the decoy: {report:?}",
        all.len(),
        started.elapsed()
    );
    Ok(())
}

/// A container writes a setuid-root copy of a shell and a device node through a read-write
/// entry. The files backend serves read-write entries only below a directory closed to
/// group and others, so no unprivileged host user reaches (or runs) what was planted; a
/// read-write directory every host user can traverse is not served at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setuid_binary_planted_through_a_read_write_entry_gives_a_host_user_nothing(
) -> anyhow::Result<()> {
    let dir = scratch("suid")?;
    let top = served_scratch("suid")?;
    let srv = top.join("srv");
    let scratch_dir = srv.join("private/scratch");
    std::fs::create_dir_all(scratch_dir.join("job-a"))?;
    for p in [&srv, &srv.join("private"), &scratch_dir] {
        set_mode(p, 0o755)?;
    }
    let config = top.join("devices.toml");
    std::fs::write(
        &config,
        format!(
            "[[files]]\ndir = \"{}\"\nentries = \"directories\"\nread_write = true\n\
             container_path = \"/scratch\"\nattributes = {{ type = \"scratch\" }}\n",
            scratch_dir.display()
        ),
    )?;
    let files = FilesDiscovery::new(config, "/".into(), &[srv.to_string_lossy().into_owned()])?;
    // Every directory above traversable by all: refused, naming why.
    ensure!(
        files.discover()?.is_empty(),
        "a read-write entry under 0755 parents was served"
    );
    let reason = files.refused().into_values().collect::<Vec<_>>().join(" ");
    ensure!(reason.contains("read-write"), "{reason}");
    set_mode(&srv.join("private"), 0o700)?;
    let devices = files.discover()?;
    let dev = devices
        .first()
        .context("the read-write entry under a 0700 parent")?;

    let n = node(&dir, &srv.to_string_lossy(), None).await?;
    let pod = pod_for(&n, "suid", 1, dev.edits.clone()).await?;
    let id = n
        .cri
        .create(
            &pod,
            "c0",
            "cp /bin/busybox /scratch/sh && chmod 4755 /scratch/sh && \
             mknod /scratch/mem c 1 1; ls -ln /scratch; echo DONE",
        )
        .await
        .map_err(|e| anyhow::anyhow!("create: {}", e.message()))?;
    n.cri.start(&id).await?;
    let log = n
        .cri
        .wait_log(&pod, "c0", "DONE", Duration::from_secs(60))
        .await?;
    n.cri.remove_pod(&pod).await?;
    let planted = scratch_dir.join("job-a/sh");
    let meta = std::fs::metadata(&planted).with_context(|| format!("nothing planted: {log}"))?;
    // The attack is real: a setuid-root binary on the host's filesystem.
    ensure!(
        meta.uid() == 0 && meta.mode() & 0o4000 != 0,
        "planted {:o} uid {}",
        meta.mode(),
        meta.uid()
    );
    let mut tried = 0;
    let mut reached = 0;
    for p in [planted.clone(), scratch_dir.join("job-a/mem")] {
        tried += 1;
        let path = p.clone();
        let r = as_nobody(move || std::fs::File::open(&path).map(drop))
            .join()
            .map_err(|_| anyhow::anyhow!("panicked"))??;
        if r.is_ok() {
            reached += 1;
        }
    }
    // And run it as the host user: exec needs search permission on every directory above.
    tried += 1;
    let run = std::process::Command::new(&planted)
        .args(["id", "-u"])
        .uid(NOBODY)
        .gid(NOBODY)
        .output();
    if let Ok(out) = &run {
        reached += 1;
        eprintln!("ran: {}", String::from_utf8_lossy(&out.stdout));
    }
    ensure!(
        reached == 0,
        "{reached} of {tried} attempts reached the planted files"
    );
    println!("{tried} attempts by uid {NOBODY} on planted setuid/device files, none reached them");
    Ok(())
}

/// The persistenced socket swapped for a symlink to another host socket (containerd's, in
/// the real attack): discovery leaves it out, and graft-nri refuses a container whose
/// record still mounts it. With the real socket back, the container gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistenced_socket_swapped_for_a_symlink_is_refused() -> anyhow::Result<()> {
    let dir = scratch("psock")?;
    let fake = FakeNode::create(&dir.join("node"))?;
    let hook = static_hook()?.to_string_lossy().into_owned();
    let sock = fake.host.join("run/nvidia-persistenced/socket");
    let source = sock.to_string_lossy().into_owned();
    let decoy = dir.join("decoy.sock");
    let _decoy = std::os::unix::net::UnixListener::bind(&decoy)?;
    let mounts_socket = |fake: &FakeNode| -> anyhow::Result<bool> {
        let devices =
            common::discovery(fake, common::as_driver_root(fake), 0, &hook)?.discover()?;
        let gpu = devices
            .iter()
            .find(|d| d.name == "gpu-2")
            .context("gpu-2")?;
        Ok(gpu.edits.mounts.iter().any(|m| m.source == source))
    };
    ensure!(mounts_socket(&fake)?, "the real socket is mounted");
    let swap = |to_link: bool| -> anyhow::Result<()> {
        std::fs::remove_file(&sock)?;
        if to_link {
            std::os::unix::fs::symlink(&decoy, &sock)?;
        } else {
            drop(std::os::unix::net::UnixListener::bind(&sock)?);
        }
        Ok(())
    };
    swap(true)?;
    ensure!(
        !mounts_socket(&fake)?,
        "discovery mounted a symlinked socket"
    );

    let n = node(&dir, "/nonexistent-served-root", Some(&fake.host)).await?;
    let edits = ContainerEdits {
        mounts: vec![bind(&source, "/run/nvidia-persistenced/socket", true)],
        ..Default::default()
    };
    let script = "test -S /run/nvidia-persistenced/socket && echo SOCK_OK; echo DONE";
    // Published as a socket, then swapped before the container: refused, naming why.
    let pod = pod_for(&n, "swapped", 1, edits.clone()).await?;
    let e = n
        .cri
        .create(&pod, "c0", script)
        .await
        .err()
        .context("a container got a symlinked persistenced socket")?;
    ensure!(e.message().contains("symlink"), "{}", e.message());
    n.cri.remove_pod(&pod).await?;
    // The real socket in a directory its unprivileged daemon account owns (packaged
    // drivers): that account could swap it, so it is left out and refused too.
    swap(false)?;
    let sock_dir = sock.parent().context("parent")?;
    std::os::unix::fs::chown(sock_dir, Some(NOBODY), Some(NOBODY))?;
    ensure!(
        !mounts_socket(&fake)?,
        "discovery mounted a socket in nobody's directory"
    );
    let pod = pod_for(&n, "nobodys", 1, edits.clone()).await?;
    let e = n
        .cri
        .create(&pod, "c0", script)
        .await
        .err()
        .context("a container got a socket from a directory nobody owns")?;
    ensure!(e.message().contains("uid 65534"), "{}", e.message());
    n.cri.remove_pod(&pod).await?;
    std::os::unix::fs::chown(sock_dir, Some(0), Some(0))?;
    // The control: the real socket is handed out.
    let pod = pod_for(&n, "real", 1, edits).await?;
    let id = n
        .cri
        .create(&pod, "c0", script)
        .await
        .map_err(|e| anyhow::anyhow!("create: {}", e.message()))?;
    n.cri.start(&id).await?;
    let log = n
        .cri
        .wait_log(&pod, "c0", "DONE", Duration::from_secs(60))
        .await?;
    ensure!(log.contains("SOCK_OK"), "{log}");
    n.cri.remove_pod(&pod).await?;
    println!(
        "persistenced socket swapped for a symlink, and in nobody's directory: refused at discovery and at CreateContainer (4 attack cases)"
    );
    Ok(())
}
