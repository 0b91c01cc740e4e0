use super::*;
use std::os::unix::fs::symlink;

fn tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    std::fs::create_dir_all(p.join("srv/lic/sub")).unwrap();
    std::fs::write(p.join("srv/lic/seat-a"), b"aaaa").unwrap();
    std::fs::create_dir_all(p.join("etc")).unwrap();
    std::fs::write(p.join("etc/shadow"), b"secret").unwrap();
    symlink("/etc/shadow", p.join("srv/lic/abs")).unwrap();
    symlink("../../etc/shadow", p.join("srv/lic/rel")).unwrap();
    symlink("seat-a", p.join("srv/lic/inside")).unwrap();
    symlink("lic", p.join("srv/alias")).unwrap();
    nix::unistd::mkfifo(&p.join("srv/lic/fifo"), Mode::from_bits_truncate(0o600)).unwrap();
    t
}

#[test]
fn files_and_directories_are_found() {
    let t = tree();
    let e = open_entry(t.path(), "/srv/lic/seat-a").unwrap();
    assert_eq!((e.kind, e.size), (EntryType::File, 4));
    assert_eq!(
        open_entry(t.path(), "/srv/lic/sub").unwrap().kind,
        EntryType::Directory
    );
}

#[test]
fn no_symlink_is_followed_anywhere() {
    let t = tree();
    for (path, at) in [
        ("/srv/lic/abs", "/srv/lic/abs"),
        ("/srv/lic/rel", "/srv/lic/rel"),
        // Even one that stays inside the directory: the rule has no exceptions.
        ("/srv/lic/inside", "/srv/lic/inside"),
        ("/srv/alias/seat-a", "/srv/alias"),
    ] {
        match open_entry(t.path(), path) {
            Err(EntryError::Symlink { at: a, .. }) => assert_eq!(a, at, "{path}"),
            other => panic!("{path}: {other:?}"),
        }
    }
}

#[test]
fn other_types_and_bad_paths_are_refused() {
    let t = tree();
    let err = open_entry(t.path(), "/srv/lic/fifo").unwrap_err();
    assert!(err.to_string().contains("FIFO"), "{err}");
    assert!(matches!(
        open_entry(t.path(), "/srv/lic/seat-a/x"),
        Err(EntryError::NotDirectory { .. })
    ));
    assert!(open_entry(t.path(), "/srv/lic/gone")
        .unwrap_err()
        .is_missing());
    for bad in ["srv/lic/seat-a", "/srv/../etc/shadow", "/srv//lic"] {
        assert!(matches!(
            open_entry(t.path(), bad),
            Err(EntryError::NotClean { .. })
        ));
    }
    assert!(open_entry(t.path(), "/").is_err());
}

#[test]
fn directories_another_account_can_write_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let t = tree();
    let lic = t.path().join("srv/lic");
    let e = open_entry(t.path(), "/srv/lic/seat-a").unwrap();
    assert!(!e.private);
    // Group- or world-writable, sticky or not (/tmp-style): refused, naming the mode.
    for mode in [0o775, 0o757, 0o1777] {
        std::fs::set_permissions(&lic, std::fs::Permissions::from_mode(mode)).unwrap();
        let err = open_entry(t.path(), "/srv/lic/seat-a").unwrap_err();
        assert!(
            matches!(&err, EntryError::Writable { at, .. } if at == "/srv/lic")
                && err.to_string().contains(&format!("mode {mode:04o}")),
            "{mode:o}: {err}"
        );
    }
    // Another owner (only root can give a directory away).
    std::fs::set_permissions(&lic, std::fs::Permissions::from_mode(0o755)).unwrap();
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(&lic, Some(65534), None).unwrap();
        let err = open_entry(t.path(), "/srv/lic/seat-a").unwrap_err();
        assert!(err.to_string().contains("uid 65534"), "{err}");
        std::os::unix::fs::chown(&lic, Some(0), None).unwrap();
    }
    // A served directory itself is checked as one.
    let d = open_entry(t.path(), "/srv/lic").unwrap();
    d.check_trusted_dir("/srv/lic").unwrap();
    std::fs::set_permissions(&lic, std::fs::Permissions::from_mode(0o777)).unwrap();
    let d = open_entry(t.path(), "/srv/lic").unwrap();
    assert!(d.check_trusted_dir("/srv/lic").is_err());
}

#[test]
fn read_write_entries_need_a_private_directory_above() {
    use std::os::unix::fs::PermissionsExt;
    let t = tree();
    let err = open_served(t.path(), "/srv/lic/seat-a", true).unwrap_err();
    assert!(matches!(err, EntryError::NotPrivate { .. }), "{err}");
    open_served(t.path(), "/srv/lic/seat-a", false).unwrap();
    std::fs::set_permissions(t.path().join("srv"), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(
        open_served(t.path(), "/srv/lic/seat-a", true)
            .unwrap()
            .private
    );
}

#[test]
fn driver_sockets_must_be_sockets() {
    let t = tree();
    let run = t.path().join("run/nvidia-persistenced");
    std::fs::create_dir_all(&run).unwrap();
    let sock = run.join("socket");
    let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let p = "/run/nvidia-persistenced/socket";
    assert!(
        is_driver_socket(p)
            && is_driver_socket("/run/nvidia/driver/run/nvidia-persistenced/socket")
    );
    assert!(!is_driver_socket("/run/nvidia-persistenced/socketx"));
    assert_eq!(open_socket(t.path(), p).unwrap().kind, EntryType::Socket);
    std::fs::remove_file(&sock).unwrap();
    symlink("/run/containerd/containerd.sock", &sock).unwrap();
    assert!(matches!(
        open_socket(t.path(), p),
        Err(EntryError::Symlink { .. })
    ));
    std::fs::remove_file(&sock).unwrap();
    std::fs::write(&sock, "").unwrap();
    assert!(matches!(
        open_socket(t.path(), p),
        Err(EntryError::NotSocket { .. })
    ));
}

#[test]
fn device_nodes_are_refused() {
    let err = open_entry(Path::new("/"), "/dev/null").unwrap_err();
    assert!(err.to_string().contains("character device"), "{err}");
}
