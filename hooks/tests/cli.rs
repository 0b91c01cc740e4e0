//! The built `graft-hook` binary, run as the runtime runs it (explicit minimal environment),
//! against a hostile root.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn hook(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_graft-hook"))
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A refusal may come before the state is read: the pipe is then closed.
    if let Err(e) = child.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    child.wait_with_output().unwrap()
}

/// The OCI state the runtime would give for a container whose root is `root` (its bundle
/// is `root`'s parent, whose config.json is written here).
fn state_of(root: &Path) -> String {
    let bundle = root.parent().unwrap();
    std::fs::write(bundle.join("config.json"), r#"{"root":{"path":"root"}}"#).unwrap();
    format!(
        r#"{{"ociVersion":"1.2.0","id":"abc","status":"creating","pid":1,"bundle":"{}"}}"#,
        bundle.display()
    )
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.file_type().is_symlink() {
                format!("link {:?}", std::fs::read_link(&p).unwrap())
            } else if m.is_dir() {
                todo.push(p.clone());
                "dir".into()
            } else {
                format!("file {:?}", std::fs::read(&p).unwrap())
            };
            let mode = m.permissions().mode();
            out.insert(
                p.strip_prefix(dir).unwrap().into(),
                format!("{mode:o} {what}"),
            );
        }
    }
    out
}

/// `root/` whose `/etc` and library directory lead to `decoy/`, absolutely and relatively.
struct Hostile {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    decoy: PathBuf,
    inside: PathBuf,
}

fn hostile() -> Hostile {
    let tmp = tempfile::tempdir_in("/tmp").unwrap();
    let (root, decoy) = (tmp.path().join("root"), tmp.path().join("decoy"));
    for d in ["etc/ld.so.conf.d", "lib"] {
        std::fs::create_dir_all(decoy.join(d)).unwrap();
    }
    std::fs::write(decoy.join("etc/ld.so.conf"), "decoy\n").unwrap();
    std::fs::write(decoy.join("lib/libcuda.so"), "decoy library").unwrap();
    let d = decoy.to_str().unwrap().trim_start_matches('/');
    // Where the symlinks lead inside the root.
    let inside = root.join(d);
    std::fs::create_dir_all(inside.join("etc")).unwrap();
    std::fs::create_dir_all(inside.join("lib")).unwrap();
    std::fs::create_dir_all(root.join("usr/lib")).unwrap();
    symlink(format!("/{d}/etc"), root.join("etc")).unwrap();
    let up = "../".repeat(12);
    symlink(
        format!("{up}{d}/lib"),
        root.join("usr/lib/x86_64-linux-gnu"),
    )
    .unwrap();
    Hostile {
        _tmp: tmp,
        root,
        decoy,
        inside,
    }
}

#[test]
fn the_binary_keeps_a_hostile_root_inside() {
    let h = hostile();
    let before = snapshot(&h.decoy);
    let root = h.root.to_str().unwrap();
    let state = state_of(&h.root);
    let out = hook(
        &[
            "create-symlinks",
            "--link",
            "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
        ],
        &state,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let bin = tempfile::tempdir().unwrap();
    let ldconfig = bin.path().join("ldconfig");
    let args = bin.path().join("args");
    std::fs::write(
        &ldconfig,
        format!("#!/bin/sh\necho \"$@\" > {}\n", args.display()),
    )
    .unwrap();
    std::fs::set_permissions(&ldconfig, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = hook(
        &[
            "update-ldcache",
            "--ldconfig",
            ldconfig.to_str().unwrap(),
            "--folder",
            "/usr/lib/x86_64-linux-gnu",
        ],
        &state,
    );
    if !is_root() {
        // Not root's: graft-hook will not run it (see ldconfig_must_be_roots_alone).
        assert!(stderr(&out).contains("not root"), "{}", stderr(&out));
        return;
    }
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(before, snapshot(&h.decoy), "the decoy changed");
    let link = std::fs::read_link(h.inside.join("lib/libcuda.so")).unwrap();
    assert_eq!(link, Path::new("libcuda.so.1"));
    let conf = h.inside.join("etc/ld.so.conf.d/00-graft-nvidia.conf");
    assert!(std::fs::read_to_string(conf)
        .unwrap()
        .contains("/usr/lib/x86_64-linux-gnu\n"));
    let main = std::fs::read_to_string(h.inside.join("etc/ld.so.conf")).unwrap();
    assert_eq!(main, "include /etc/ld.so.conf.d/*.conf\n");
    assert_eq!(
        std::fs::read_to_string(args).unwrap(),
        format!("-r {root}\n")
    );
}

#[test]
fn the_root_and_id_come_from_the_oci_state() {
    let h = hostile();
    let bundle = h.root.parent().unwrap();
    let state = state_of(&h.root);
    let out = hook(
        &[
            "create-symlinks",
            "--link",
            "t::/usr/lib/x86_64-linux-gnu/x",
        ],
        &state,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_link(h.inside.join("lib/x")).unwrap(),
        Path::new("t")
    );
    // The id is taken from the state: no driver here, so nothing else to do.
    let copy = bundle.join("state/params");
    let args = [
        "disable-device-node-modification",
        "--params-copy",
        copy.to_str().unwrap(),
    ];
    let out = hook(&args, &state);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = hook(&[&args[..], &["--container-id", "other"]].concat(), &state);
    assert!(
        stderr(&out).contains("differs from the OCI state's id"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bad_arguments_fail_with_a_message() {
    let h = hostile();
    let state = state_of(&h.root);
    let root = h.root.to_str().unwrap();
    let before = snapshot(&h.decoy);
    for (args, want) in [
        (
            vec!["create-symlinks", "--link", "t::/usr/../../x"],
            "clean absolute",
        ),
        (
            vec![
                "update-ldcache",
                "--ldconfig",
                "/sbin/ldconfig",
                "--folder",
                "lib",
            ],
            "clean absolute",
        ),
        (
            vec![
                "disable-device-node-modification",
                "--params-copy",
                "/x/p",
                "--container-id",
                "../escape",
            ],
            "differs from the OCI state's id",
        ),
        // The test-only flags: never honoured by a built graft-hook.
        (
            vec!["--rootfs", root, "create-symlinks", "--link", "t::/x"],
            "--rootfs is refused",
        ),
        (
            vec!["--rootfs", "/", "create-symlinks", "--link", "t::/x"],
            "--rootfs is refused",
        ),
        (
            vec![
                "disable-device-node-modification",
                "--params-copy",
                "/x/p",
                "--host-params",
                "/etc/shadow",
            ],
            "--host-params is refused",
        ),
    ] {
        let out = hook(&args, &state);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr(&out);
        assert!(
            err.starts_with("graft-hook: ") && err.contains(want),
            "{args:?}: {err}"
        );
    }
    assert_eq!(before, snapshot(&h.decoy));
}

/// graft-hook runs ldconfig as root on the host: one that anyone but root could have
/// written, or a symlink, is refused before anything is done, and never runs.
#[test]
fn ldconfig_must_be_roots_alone() {
    if !is_root() {
        eprintln!("skipped: needs root (an ldconfig as graft-hook trusts it is root-owned)");
        return;
    }
    let h = hostile();
    let state = state_of(&h.root);
    let before = snapshot(&h.decoy);
    let bin = tempfile::tempdir().unwrap();
    let marker = bin.path().join("ran");
    let script = |name: &str, mode: u32| {
        let p = bin.path().join(name);
        std::fs::write(&p, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    };
    let mut cases = vec![
        (script("world", 0o777), "group or others write"),
        (script("group", 0o775), "group or others write"),
    ];
    let link = bin.path().join("link");
    symlink("/sbin/ldconfig", &link).unwrap();
    cases.push((link, "is a symlink"));
    if is_root() {
        let nobody = script("nobody", 0o755);
        std::os::unix::fs::chown(&nobody, Some(65534), Some(65534)).unwrap();
        cases.push((nobody, "owned by uid 65534, not root"));
    }
    let tried = cases.len();
    for (ldconfig, want) in cases {
        for sub in ["update-ldcache", "nvidia-container"] {
            let mut args = vec![sub, "--ldconfig", ldconfig.to_str().unwrap()];
            if sub == "nvidia-container" {
                args.extend(["--params-copy", "/x/p"]);
            }
            let out = hook(&args, &state);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
            assert!(err.contains(want), "{args:?}: {err}");
        }
    }
    assert!(!marker.exists(), "a refused ldconfig ran");
    assert_eq!(before, snapshot(&h.decoy));
    println!("{tried} ldconfigs refused, none ran");
}
