use std::os::unix::fs::{MetadataExt, PermissionsExt};

use super::*;
use crate::driver_files::DriverFile;

const LIB: &str = "/usr/lib/x86_64-linux-gnu";

struct Node {
    _tmp: tempfile::TempDir,
    roots: Roots,
    base: PathBuf,
    files: DriverFiles,
}

fn node() -> Node {
    let tmp = tempfile::tempdir().unwrap();
    let host = tmp.path().join("host");
    let write = |p: &str, text: &str, mode: u32| {
        let at = host.join(p.trim_start_matches('/'));
        fs::create_dir_all(at.parent().unwrap()).unwrap();
        fs::write(&at, text).unwrap();
        fs::set_permissions(&at, Permissions::from_mode(mode)).unwrap();
    };
    write(&format!("{LIB}/libcuda.so.580.95.05"), "libcuda", 0o644);
    write(&format!("{LIB}/libGLX_nvidia.so.580.95.05"), "glx", 0o644);
    write("/usr/bin/nvidia-smi", "smi", 0o4755);
    write("/lib/firmware/nvidia/580.95.05/gsp_ga10x.bin", "fw", 0o600);
    let file = |cap, path: &str| DriverFile {
        capability: cap,
        path: path.into(),
        destination: path.into(),
    };
    let files = DriverFiles {
        version: "580.95.05".into(),
        libraries: vec![
            file(Capability::Compute, &format!("{LIB}/libcuda.so.580.95.05")),
            file(
                Capability::Graphics,
                &format!("{LIB}/libGLX_nvidia.so.580.95.05"),
            ),
        ],
        binaries: vec![file(Capability::Utility, "/usr/bin/nvidia-smi")],
        firmware: vec!["/lib/firmware/nvidia/580.95.05/gsp_ga10x.bin".into()],
        sockets: vec!["/run/nvidia-persistenced/socket".into()],
        ..Default::default()
    };
    Node {
        roots: Roots {
            host: host.clone(),
            driver: "/".into(),
        },
        base: tmp.path().join("state/nvidia/driver"),
        files,
        _tmp: tmp,
    }
}

#[test]
fn the_default_files_and_firmware_are_copied_readable_and_never_setuid() {
    let n = node();
    let p = prepare(&n.roots, &n.files, &n.base).unwrap();
    assert_eq!(
        p.files,
        [
            format!("{LIB}/libcuda.so.580.95.05"),
            "/usr/bin/nvidia-smi".to_string(),
            "/lib/firmware/nvidia/580.95.05/gsp_ga10x.bin".to_string(),
        ]
    );
    let name = p.path.file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with("580.95.05-") && driver_dir::is_key(name),
        "{name}"
    );
    let mode = |f: &str| fs::metadata(p.path.join(&f[1..])).unwrap().mode() & 0o7777;
    assert_eq!(mode(&p.files[0]), 0o644);
    assert_eq!(mode(&p.files[1]), 0o755);
    assert_eq!(mode(&p.files[2]), 0o644);
    assert_eq!(
        fs::read_to_string(p.path.join("usr/bin/nvidia-smi")).unwrap(),
        "smi"
    );
    // A graphics library is not every container's: it stays a mount of its own.
    assert!(!p
        .path
        .join(&format!("{LIB}/libGLX_nvidia.so.580.95.05")[1..])
        .exists());
    let dir_mode = fs::metadata(p.path.join("usr/lib")).unwrap().mode() & 0o7777;
    assert_eq!(dir_mode, 0o755);
}

#[test]
fn a_prepared_directory_is_reused_and_a_changed_file_gets_a_new_one() {
    let n = node();
    let first = prepare(&n.roots, &n.files, &n.base).unwrap();
    let ino = fs::metadata(first.path.join("usr/bin/nvidia-smi"))
        .unwrap()
        .ino();
    // A crash's staging is removed by the next build, not before.
    fs::create_dir_all(n.base.join(".staging-old/usr")).unwrap();
    let again = prepare(&n.roots, &n.files, &n.base).unwrap();
    assert_eq!(again, first);
    let ino2 = fs::metadata(again.path.join("usr/bin/nvidia-smi"))
        .unwrap()
        .ino();
    assert_eq!(ino, ino2, "rebuilt");
    // Reinstalled in place: another size, another key; the old directory stays.
    fs::write(n.roots.host.join("usr/bin/nvidia-smi"), "newer smi").unwrap();
    let changed = prepare(&n.roots, &n.files, &n.base).unwrap();
    assert_ne!(changed.path, first.path);
    assert!(first.path.is_dir());
    assert!(!n.base.join(".staging-old").exists());
    let names: Vec<String> = fs::read_dir(&n.base)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn a_file_that_is_not_regular_or_missing_fails_and_leaves_nothing() {
    let n = node();
    let smi = n.roots.host.join("usr/bin/nvidia-smi");
    fs::remove_file(&smi).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", &smi).unwrap();
    let e = prepare(&n.roots, &n.files, &n.base)
        .unwrap_err()
        .to_string();
    assert!(e.contains("nvidia-smi is not a regular file"), "{e}");
    fs::remove_file(&smi).unwrap();
    let e = prepare(&n.roots, &n.files, &n.base)
        .unwrap_err()
        .to_string();
    assert!(e.contains("nvidia-smi"), "{e}");
    assert!(!n.base.exists() || fs::read_dir(&n.base).unwrap().count() == 0);
}
