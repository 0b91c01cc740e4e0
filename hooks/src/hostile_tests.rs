//! update-ldcache, create-symlinks and the driver files' links (`copies`) against roots
//! whose symlinks lead outside: every
//! write lands inside the root, where the container will see it, and the decoy beside the
//! root is byte-for-byte unchanged.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::ldcache::{self, CONF_NAME, INCLUDE};
use crate::testutil::*;
use crate::{copies, inroot, symlinks};

const FOLDER: &str = "/usr/lib/x86_64-linux-gnu";
const LIB_LINK: &str = "libcuda.so.580.95.05::/usr/lib/x86_64-linux-gnu/libcuda.so.1";
const ETC_LINK: &str = "graft-target::/etc/alternatives/graft-link";
const COPIES: &str = "/usr/lib/graft-nvidia";

/// `copies::link` of one driver file, in a fresh handle on the root.
fn copy(f: &Fixture, file: &str) -> anyhow::Result<()> {
    copies::link(&inroot::open_root(&f.root)?, COPIES, &[file.to_string()]).map(|_| ())
}

/// What a hostile root looks like, and where each output must land inside it (`{D}` is
/// the decoy's path without its `/`). `None`: that operation must fail.
struct Case {
    name: &'static str,
    plant: fn(&Fixture),
    conf_d: Option<&'static str>,
    main_conf: Option<&'static str>,
    lib_dir: Option<&'static str>,
    etc_dir: Option<&'static str>,
}

const REL: &str = "../../../../../../../../../../../..";

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "/etc -> <decoy>/etc (absolute)",
            plant: |f| {
                f.link("etc", "/{D}/etc");
                f.mkdir("{D}/etc");
            },
            conf_d: Some("{D}/etc/ld.so.conf.d"),
            main_conf: Some("{D}/etc/ld.so.conf"),
            lib_dir: Some("usr/lib/x86_64-linux-gnu"),
            etc_dir: Some("{D}/etc/alternatives"),
        },
        Case {
            name: "etc -> ../../../<decoy>/etc (relative escape)",
            plant: |f| {
                f.link("etc", &format!("{REL}/{{D}}/etc"));
                f.mkdir("{D}/etc");
            },
            conf_d: Some("{D}/etc/ld.so.conf.d"),
            main_conf: Some("{D}/etc/ld.so.conf"),
            lib_dir: Some("usr/lib/x86_64-linux-gnu"),
            etc_dir: Some("{D}/etc/alternatives"),
        },
        Case {
            name: "/etc -> /../../<decoy>/etc (absolute with ..)",
            plant: |f| {
                f.link("etc", "/../../../{D}/./etc");
                f.mkdir("{D}/etc");
            },
            conf_d: Some("{D}/etc/ld.so.conf.d"),
            main_conf: Some("{D}/etc/ld.so.conf"),
            lib_dir: Some("usr/lib/x86_64-linux-gnu"),
            etc_dir: Some("{D}/etc/alternatives"),
        },
        Case {
            name: "/etc/ld.so.conf.d -> <decoy>",
            plant: |f| {
                f.link("etc/ld.so.conf.d", "/{D}");
                f.mkdir("{D}");
            },
            conf_d: Some("{D}"),
            main_conf: Some("etc/ld.so.conf"),
            lib_dir: Some("usr/lib/x86_64-linux-gnu"),
            etc_dir: Some("etc/alternatives"),
        },
        Case {
            name: "/etc/ld.so.conf -> <decoy>/ld.so.conf (read inside, replaced)",
            plant: |f| {
                f.link("etc/ld.so.conf", "/{D}/ld.so.conf");
                f.write("{D}/ld.so.conf", "/inside/lib\n");
            },
            conf_d: Some("etc/ld.so.conf.d"),
            main_conf: Some("etc/ld.so.conf"),
            lib_dir: Some("usr/lib/x86_64-linux-gnu"),
            etc_dir: Some("etc/alternatives"),
        },
        Case {
            name: "/etc/ld.so.conf -> ../../<decoy>/etc/ld.so.conf, dangling inside",
            plant: |f| f.link("etc/ld.so.conf", &format!("{REL}/{{D}}/etc/ld.so.conf")),
            conf_d: Some("etc/ld.so.conf.d"),
            main_conf: Some("etc/ld.so.conf"),
            lib_dir: Some("usr/lib/x86_64-linux-gnu"),
            etc_dir: Some("etc/alternatives"),
        },
        Case {
            name: "chain /etc -> /a, /a -> /b/../c, /c -> <decoy>",
            plant: |f| {
                f.link("etc", "/a");
                f.link("a", "/b/../c");
                f.mkdir("b");
                f.link("c", "/{D}");
                f.mkdir("{D}");
            },
            conf_d: Some("{D}/ld.so.conf.d"),
            main_conf: Some("{D}/ld.so.conf"),
            lib_dir: Some("usr/lib/x86_64-linux-gnu"),
            etc_dir: Some("{D}/alternatives"),
        },
        Case {
            name: "chain with a relative escape at the end",
            plant: |f| {
                f.link("etc", "a/../c");
                f.mkdir("a");
                f.link("c", &format!("d/{REL}/{{D}}/etc"));
                f.mkdir("d");
                f.mkdir("{D}/etc");
            },
            conf_d: Some("{D}/etc/ld.so.conf.d"),
            main_conf: Some("{D}/etc/ld.so.conf"),
            lib_dir: Some("usr/lib/x86_64-linux-gnu"),
            etc_dir: Some("{D}/etc/alternatives"),
        },
        Case {
            name: "/usr/lib/x86_64-linux-gnu -> <decoy>/lib",
            plant: |f| {
                f.link("usr/lib/x86_64-linux-gnu", "/{D}/lib");
                f.mkdir("{D}/lib");
            },
            conf_d: Some("etc/ld.so.conf.d"),
            main_conf: Some("etc/ld.so.conf"),
            lib_dir: Some("{D}/lib"),
            etc_dir: Some("etc/alternatives"),
        },
        Case {
            name: "/usr -> ../<decoy> and /usr/lib -> /../lib chain",
            plant: |f| {
                f.link("usr", &format!("{REL}/{{D}}"));
                f.link("{D}/lib", "/../../{D}/real-lib");
                f.mkdir("{D}/real-lib/x86_64-linux-gnu");
            },
            conf_d: Some("etc/ld.so.conf.d"),
            main_conf: Some("etc/ld.so.conf"),
            lib_dir: Some("{D}/real-lib/x86_64-linux-gnu"),
            etc_dir: Some("etc/alternatives"),
        },
        Case {
            name: "existing link pointing at the decoy is replaced, not followed",
            plant: |f| {
                f.link(
                    "usr/lib/x86_64-linux-gnu/libcuda.so.1",
                    "/{D}/lib/libdecoy.so",
                );
                f.link("etc/alternatives/graft-link", "/{D}/lib");
            },
            conf_d: Some("etc/ld.so.conf.d"),
            main_conf: Some("etc/ld.so.conf"),
            lib_dir: Some("usr/lib/x86_64-linux-gnu"),
            etc_dir: Some("etc/alternatives"),
        },
        Case {
            name: "dangling /etc -> <decoy>/etc: refused, nothing created outside",
            plant: |f| f.link("etc", "/{D}/etc"),
            conf_d: None,
            main_conf: None,
            lib_dir: Some("usr/lib/x86_64-linux-gnu"),
            etc_dir: None,
        },
        Case {
            name: "/etc -> /etc loop",
            plant: |f| f.link("etc", "/etc"),
            conf_d: None,
            main_conf: None,
            lib_dir: Some("usr/lib/x86_64-linux-gnu"),
            etc_dir: None,
        },
    ]
}

/// Every case, against the resolver pathrs picks in this process. Returns how many.
pub fn run_cases() -> usize {
    let all = cases();
    for c in &all {
        let f = Fixture::new();
        (c.plant)(&f);
        let before = f.decoy_snapshot();
        let conf = ldcache::write_config(&f.root, &[FOLDER.to_string()]);
        let lib = symlinks::create(&f.root, &[LIB_LINK.to_string()]);
        let etc = symlinks::create(&f.root, &[ETC_LINK.to_string()]);
        let copy_lib = copy(&f, &format!("{FOLDER}/libnvidia-ml.so.580.95.05"));
        let copy_etc = copy(&f, "/etc/alternatives/nvidia-copy");
        assert_eq!(before, f.decoy_snapshot(), "{}: the decoy changed", c.name);
        let name = c.name;
        match c.conf_d {
            Some(d) => {
                assert!(conf.is_ok(), "{name}: {conf:?}");
                let text = std::fs::read_to_string(f.in_root(d).join(CONF_NAME)).unwrap();
                assert!(text.contains(&format!("\n{FOLDER}\n")), "{name}");
            }
            None => assert!(conf.is_err(), "{name}: update-ldcache should fail"),
        }
        if let Some(m) = c.main_conf {
            let at = f.in_root(m);
            assert!(std::fs::symlink_metadata(&at).unwrap().is_file(), "{name}");
            let text = std::fs::read_to_string(at).unwrap();
            assert!(text.starts_with(&format!("{INCLUDE}\n")), "{name}: {text}");
        }
        let lib_copy = format!("{COPIES}{FOLDER}/libnvidia-ml.so.580.95.05");
        let etc_copy = format!("{COPIES}/etc/alternatives/nvidia-copy");
        for (want, got, link, target) in [
            (c.lib_dir, &lib, "libcuda.so.1", "libcuda.so.580.95.05"),
            (c.etc_dir, &etc, "graft-link", "graft-target"),
            (c.lib_dir, &copy_lib, "libnvidia-ml.so.580.95.05", &lib_copy),
            (c.etc_dir, &copy_etc, "nvidia-copy", &etc_copy),
        ] {
            let Some(d) = want else {
                assert!(got.is_err(), "{name}: create-symlinks should fail");
                continue;
            };
            assert!(got.is_ok(), "{name}: {got:?}");
            let at = f.in_root(d).join(link);
            assert_eq!(
                std::fs::read_link(&at).unwrap(),
                Path::new(target),
                "{name}"
            );
        }
    }
    // The symlinked ld.so.conf was read inside the root.
    let f = Fixture::new();
    (all[4].plant)(&f);
    ldcache::write_config(&f.root, &[]).unwrap();
    let main = std::fs::read_to_string(f.root.join("etc/ld.so.conf")).unwrap();
    assert_eq!(main, format!("{INCLUDE}\n/inside/lib\n"));
    all.len()
}

#[test]
fn hostile_roots_stay_inside() {
    let n = run_cases();
    eprintln!("{n} hostile roots");
}

/// The same cases with openat2 denied, so that pathrs uses its emulated resolver.
#[test]
fn hostile_roots_stay_inside_with_the_emulated_resolver() {
    run_child("hostile_tests::emulated_resolver_child");
}

#[test]
#[ignore = "run in a child process by hostile_roots_stay_inside_with_the_emulated_resolver"]
fn emulated_resolver_child() {
    if !is_child() {
        return;
    }
    deny_syscalls(&[libc::SYS_openat2]);
    // SAFETY: a raw openat2 probe; the kernel only reads the path and the zeroed `how`.
    let probe = unsafe {
        let how = [0u64; 3];
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            c".".as_ptr(),
            how.as_ptr(),
            24usize,
        )
    };
    assert_eq!(probe, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::ENOSYS)
    );
    run_cases();
    race(100);
}

/// Swaps `root/etc` and `root/usr/lib` between real directories and symlinks to the decoy
/// while the hook writes through them.
fn race(rounds: usize) {
    let f = Fixture::new();
    f.write("etc/ld.so.conf", "/opt/lib\n");
    f.mkdir("usr/lib");
    f.link("etc.swap", "/{D}/etc");
    f.link("usr/lib.swap", &format!("{REL}/{{D}}/lib"));
    // Half of the time the symlinks lead somewhere inside: the writes succeed there.
    f.mkdir("{D}/etc");
    let before = f.decoy_snapshot();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, root) = (stop.clone(), f.root.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for (a, b) in [("etc", "etc.swap"), ("usr/lib", "usr/lib.swap")] {
                    let flags = nix::fcntl::RenameFlags::RENAME_EXCHANGE;
                    let cwd = nix::fcntl::AT_FDCWD;
                    nix::fcntl::renameat2(cwd, &root.join(a), cwd, &root.join(b), flags).unwrap();
                    swaps += 1;
                }
            }
            swaps
        })
    };
    let (mut ok, mut failed) = (0, 0);
    for i in 0..rounds {
        let links = [
            format!("t{i}::/etc/x/libfoo.so"),
            format!("t{i}::/usr/lib/libbar.so"),
        ];
        for r in [
            ldcache::write_config(&f.root, &[FOLDER.to_string()]),
            symlinks::create(&f.root, &links),
            copy(&f, &format!("/etc/x/nvidia-copy-{i}")),
        ] {
            if r.is_ok() {
                ok += 1
            } else {
                failed += 1
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    eprintln!("race: {swaps} swaps, {ok} calls succeeded, {failed} failed");
    assert_eq!(
        before,
        f.decoy_snapshot(),
        "the decoy changed during the race"
    );
}

#[test]
fn swapping_directories_and_symlinks_never_reaches_the_decoy() {
    race(400);
}

/// update-ldcache's read of `/etc/ld.so.conf`, in a thread, with a deadline.
fn read_main_conf(f: &Fixture) -> anyhow::Result<()> {
    let root = f.root.clone();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(ldcache::write_config(&root, &[])));
    let start = Instant::now();
    let r = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the hook hung");
    assert!(start.elapsed() < Duration::from_secs(5));
    r
}

#[test]
fn a_fifo_device_directory_or_huge_ld_so_conf_is_an_error_not_a_hang() {
    let f = Fixture::new();
    f.mkdir("etc");
    nix::unistd::mkfifo(
        &f.root.join("etc/ld.so.conf"),
        nix::sys::stat::Mode::S_IRUSR,
    )
    .unwrap();
    let err = format!("{:#}", read_main_conf(&f).unwrap_err());
    assert!(
        err.contains("/etc/ld.so.conf") && err.contains("not a regular file"),
        "{err}"
    );

    let f = Fixture::new();
    f.mkdir("etc/ld.so.conf");
    assert!(read_main_conf(&f).is_err());

    let f = Fixture::new();
    f.write("etc/ld.so.conf", &"#".repeat(2 << 20));
    let err = format!("{:#}", read_main_conf(&f).unwrap_err());
    assert!(err.contains("larger"), "{err}");

    // /dev/zero as the image sees it: the runtime has put device nodes in the root's /dev.
    let f = Fixture::new();
    f.mkdir("dev");
    let kind = nix::sys::stat::SFlag::S_IFCHR;
    let mode = nix::sys::stat::Mode::from_bits_truncate(0o666);
    let zero = f.root.join("dev/zero");
    if nix::sys::stat::mknod(&zero, kind, mode, nix::sys::stat::makedev(1, 5)).is_err() {
        eprintln!("skipped the /dev/zero case: cannot mknod here");
        return;
    }
    for target in ["/dev/zero", "../dev/zero", "../../../../../../dev/zero"] {
        let _ = std::fs::remove_file(f.root.join("etc/ld.so.conf"));
        f.link("etc/ld.so.conf", target);
        let err = format!("{:#}", read_main_conf(&f).unwrap_err());
        assert!(err.contains("not a regular file"), "{target}: {err}");
    }
}
