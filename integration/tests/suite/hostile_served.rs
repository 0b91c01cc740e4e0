//! Attacks on what the files backend serves and on the NVIDIA driver's sockets, through real
//! containerd 2.2 and runc: a served directory another account can write, an unprivileged
//! process swapping a served entry for a symlink to a host decoy while 200 containers are
//! created, a setuid binary planted through a read-write entry, and the persistenced socket
//! swapped for a symlink. No container may see the decoy, and no host user may gain from
//! what a container planted.
//!
//! Needs root and the testbed; the README's test command provides them. The served trees
//! live under /run (root's, 0755): /tmp is world-writable, so nothing below it is served.

use crate::common;
mod served_node;

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_driver::discovery::files::{FilesDiscovery, RefusedDirs};
use graft_driver::discovery::Discovery;
use graft_integration::fake_gpu::FakeNode;
use graft_integration::testbed::static_hook;
use graft_record::ContainerEdits;

use served_node::*;

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
