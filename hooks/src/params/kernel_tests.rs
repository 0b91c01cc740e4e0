//! `disable_modification` with the kernel's mounts: the mount's options as the kernel
//! shows them, and the fallback on a kernel without the new mount API. They need root (a
//! private mount namespace) and are skipped, saying why, without it; what they mount and
//! where is checked without root in `params_tests.rs`.

use super::tests::{setup, Setup, ON};
use super::*;
use crate::testutil::*;

/// The mount over `target` (a host path) as this thread's namespace shows it.
fn mount_options(target: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/thread-self/mountinfo").unwrap();
    let target = target.to_str().unwrap();
    info.lines()
        .rfind(|l| l.split(' ').nth(4) == Some(target))
        .map(|l| l.split(' ').nth(5).unwrap().to_string())
}

/// The target reads as the rewritten copy, cannot be written, and the copy is gone.
fn check_mounted(s: &Setup, at: &str) {
    let target = s.f.in_root(at);
    let text = std::fs::read_to_string(&target).unwrap();
    assert_eq!(
        text,
        rewrite(&std::fs::read_to_string(&s.host).unwrap()).unwrap()
    );
    let err = std::fs::OpenOptions::new()
        .write(true)
        .open(&target)
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    let opts = mount_options(&target).expect("no mount over the target");
    for o in ["ro", "nosuid", "nodev", "noexec"] {
        assert!(opts.split(',').any(|x| x == o), "{o} not in {opts}");
    }
    let left: Vec<_> = std::fs::read_dir(s.state_dir()).unwrap().collect();
    assert!(left.is_empty(), "left on the host: {left:?}");
    let mode = std::fs::metadata(s.state_dir()).unwrap().permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o700
    );
}

/// `emulated`: pathrs's emulated resolver refuses the unlinked copy on a second run
/// ("(deleted)" in its path check); an error then, but still nothing changed.
fn mounts_a_read_only_copy(emulated: bool) {
    let s = setup("proc/driver/nvidia/params", ON);
    s.run("c1").unwrap();
    check_mounted(&s, "proc/driver/nvidia/params");
    // A second run sees the container's params already say 0.
    let again = s.run("c1");
    assert!(emulated || again.is_ok(), "{again:?}");
    check_mounted(&s, "proc/driver/nvidia/params");
}

#[test]
fn mounts_a_read_only_copy_and_leaves_nothing_on_the_host() {
    in_private_mount_ns(|| mounts_a_read_only_copy(false));
}

#[test]
fn a_leftover_copy_is_replaced_not_followed() {
    in_private_mount_ns(|| {
        let s = setup("proc/driver/nvidia/params", ON);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(s.state_dir())
            .unwrap();
        let copy = copy_path(&s.base, "c1").unwrap();
        std::os::unix::fs::symlink(s.f.decoy.join("lib/libdecoy.so"), &copy).unwrap();
        let before = s.f.decoy_snapshot();
        s.run("c1").unwrap();
        check_mounted(&s, "proc/driver/nvidia/params");
        assert_eq!(before, s.f.decoy_snapshot());
    });
}

#[test]
fn containers_in_parallel_each_get_their_own_copy() {
    in_private_mount_ns(|| {
        let state = tempfile::tempdir_in("/tmp").unwrap();
        let base = state.path().join("nvidia/params");
        let runs: Vec<_> = (0..8)
            .map(|i| {
                let mut s = setup("proc/driver/nvidia/params", &format!("{ON}Tag: {i}\n"));
                s.base = base.clone();
                std::thread::spawn(move || {
                    for round in 0..10 {
                        s.run(&format!("container-{i}")).unwrap();
                        let text =
                            std::fs::read_to_string(s.f.in_root("proc/driver/nvidia/params"));
                        assert!(
                            text.unwrap().contains(&format!("Tag: {i}\n")),
                            "round {round}"
                        );
                    }
                    s
                })
            })
            .collect();
        let done: Vec<Setup> = runs.into_iter().map(|t| t.join().unwrap()).collect();
        for s in &done {
            check_mounted(s, "proc/driver/nvidia/params");
        }
    });
}

/// `proc` of the image leads to the decoy: the mount lands on the file inside the root.
pub fn proc_symlinks_stay_inside() -> usize {
    let variants = [
        ("/{D}/proc", "{D}/proc/driver/nvidia/params"),
        (
            "../../../../../../../../../../{D}/proc",
            "{D}/proc/driver/nvidia/params",
        ),
        ("/x/../../{D}/proc", "{D}/proc/driver/nvidia/params"),
    ];
    for (link, inside) in variants {
        let s = setup(inside, ON);
        s.f.mkdir("x");
        s.f.link("proc", link);
        let before = s.f.decoy_snapshot();
        s.run("c1").unwrap();
        check_mounted(&s, inside);
        assert_eq!(before, s.f.decoy_snapshot(), "{link}: the decoy changed");
        let decoy_params = s.f.decoy.join("proc/driver/nvidia/params");
        assert_eq!(mount_options(&decoy_params), None, "{link}");
    }
    // Dangling inside the root: nothing to mount, nothing touched.
    let s = setup("elsewhere", ON);
    s.f.link("proc", "/{D}/proc");
    let before = s.f.decoy_snapshot();
    s.run("c1").unwrap();
    assert_eq!(before, s.f.decoy_snapshot());
    assert_eq!(
        mount_options(&s.f.decoy.join("proc/driver/nvidia/params")),
        None
    );
    variants.len() + 1
}

#[test]
fn a_symlinked_proc_still_mounts_inside_the_root() {
    in_private_mount_ns(proc_symlinks_stay_inside);
}

/// Without open_tree, mount_setattr and move_mount (kernels before 5.2/5.12): the classic
/// bind and read-only remount, with openat2 denied too so pathrs emulates it.
#[test]
fn the_fallback_mount_path_and_emulated_resolver_work() {
    if !is_root() {
        eprintln!("skipped: needs root for a private mount namespace");
        return;
    }
    run_child("params::kernel_tests::fallback_child");
}

#[test]
#[ignore = "run in a child process by the_fallback_mount_path_and_emulated_resolver_work"]
fn fallback_child() {
    if !is_child() {
        return;
    }
    in_private_mount_ns(|| {
        deny_syscalls(&[
            libc::SYS_open_tree,
            libc::SYS_move_mount,
            libc::SYS_mount_setattr,
            libc::SYS_openat2,
        ]);
        let (src, dst) = (tempfile::tempfile().unwrap(), tempfile::tempfile().unwrap());
        let e = Mounter::attach_clone(
            &mount::Kernel,
            src.as_fd(),
            dst.as_fd(),
            mount::READ_ONLY_ATTRS,
            mount::MS_PRIVATE,
        )
        .unwrap_err();
        assert_eq!(e, Errno::ENOSYS);
        mounts_a_read_only_copy(true);
        proc_symlinks_stay_inside();
    })
    .expect("needs a private mount namespace");
}

/// The MIG `config` and `monitor` capability files get their `DeviceFileModify` hidden
/// the same way, so libnvidia-ml in the container does not create `nvidia-cap1` and
/// `nvidia-cap2`; a capability file that already says 0 is left alone.
#[test]
fn the_mig_capability_files_are_hidden_too() {
    if !is_root() {
        eprintln!("skipped: needs root to mount");
        return;
    }
    const CAP_ON: &str = "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n";
    let s = setup("proc/driver/nvidia/params", ON);
    let caps = s.f.root.join("proc/driver/nvidia/capabilities/mig");
    std::fs::create_dir_all(&caps).unwrap();
    std::fs::write(caps.join("config"), CAP_ON).unwrap();
    std::fs::write(caps.join("monitor"), CAP_ON).unwrap();
    // The "host" /proc/driver/nvidia beside the host params file.
    let host_caps = s.host.parent().unwrap().join("capabilities/mig");
    std::fs::create_dir_all(&host_caps).unwrap();
    std::fs::write(host_caps.join("config"), CAP_ON).unwrap();
    std::fs::write(
        host_caps.join("monitor"),
        CAP_ON.replace("Modify: 1", "Modify: 0"),
    )
    .unwrap();
    let root = s.f.root.clone();
    let (host, base, state) = (s.host.clone(), s.base.clone(), s.state_dir());
    let seen = in_private_mount_ns(move || {
        disable_modification(&root, &host, &base, "c1").unwrap();
        let read = |rel: &str| std::fs::read_to_string(root.join(rel)).unwrap();
        let left = std::fs::read_dir(&state).unwrap().count();
        (
            read("proc/driver/nvidia/params"),
            read("proc/driver/nvidia/capabilities/mig/config"),
            read("proc/driver/nvidia/capabilities/mig/monitor"),
            left,
        )
    })
    .expect("private mount namespace");
    assert!(seen.0.contains("ModifyDeviceFiles: 0"), "{}", seen.0);
    assert!(seen.1.contains("DeviceFileModify: 0"), "{}", seen.1);
    assert!(seen.1.contains("DeviceFileMinor: 1"), "{}", seen.1);
    // The host says 0 for monitor: nothing mounted, the container's own file is read.
    assert_eq!(seen.2, CAP_ON);
    assert_eq!(seen.3, 0, "copies left on the host");
}
