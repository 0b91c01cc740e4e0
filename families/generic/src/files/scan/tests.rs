use std::os::unix::fs::symlink;

use super::*;
use crate::files::ServedEntries;

struct Node {
    root: tempfile::TempDir,
    config: PathBuf,
}

/// A host root with /srv/lic holding three seat files, a subdirectory, a hidden file and
/// symlinks out of (and within) the directory, and a config serving it.
fn node(files: &str) -> Node {
    let root = tempfile::tempdir().unwrap();
    let lic = root.path().join("srv/lic");
    std::fs::create_dir_all(lic.join("shard-0")).unwrap();
    std::fs::write(lic.join("shard-0/part"), b"0123456789").unwrap();
    for (n, body) in [
        ("Seat_A.lic", "a"),
        ("seat-b.lic", "bb"),
        ("seat-c.lic", "ccc"),
    ] {
        std::fs::write(lic.join(n), body).unwrap();
    }
    std::fs::write(lic.join(".seat-d.lic.swp"), "x").unwrap();
    std::fs::create_dir_all(root.path().join("etc")).unwrap();
    std::fs::write(root.path().join("etc/shadow"), "secret").unwrap();
    symlink("/etc/shadow", lic.join("evil.lic")).unwrap();
    symlink("../../etc/shadow", lic.join("evil-rel.lic")).unwrap();
    symlink("seat-b.lic", lic.join("alias.lic")).unwrap();
    std::fs::write(lic.join(format!("{}.lic", "x".repeat(70))), "long").unwrap();
    let config = root.path().join("devices.toml");
    std::fs::write(&config, files).unwrap();
    Node { root, config }
}

const LICENCES: &str = r#"
[[files]]
dir = "/srv/lic"
pattern = "*.lic"
container_path = "/etc/app/licence"
env = "LICENCE_FILE"
attributes = { type = "licence", vendor = "acme" }
"#;

fn discover(n: &Node) -> Vec<Device> {
    FilesDiscovery::new(n.config.clone(), n.root.path().into(), &["/srv".into()])
        .unwrap()
        .discover()
        .unwrap()
}

#[test]
fn every_plain_entry_is_a_device_and_no_symlink_is() {
    let n = node(LICENCES);
    let devs = discover(&n);
    let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
    // Hidden files, symlinks (out of the directory or not) and the subdirectory are not
    // served; the 74-character name cannot be a device name.
    assert_eq!(names, ["seat-a-lic", "seat-b-lic", "seat-c-lic"]);
    let b = &devs[1];
    assert_eq!(b.kind, Kind::Entry(EntryType::File));
    assert_eq!(b.capacity["size"], "2");
    assert_eq!(b.attributes["type"], Attribute::String("licence".into()));
    assert_eq!(b.attributes["vendor"], Attribute::String("acme".into()));
    assert_eq!(
        b.attributes["path"],
        Attribute::String("/srv/lic/seat-b.lic".into())
    );
    assert_eq!(
        b.attributes["entry"],
        Attribute::String("seat-b.lic".into())
    );
    let m = &b.edits.mounts[0];
    assert_eq!(
        (m.source.as_str(), m.destination.as_str()),
        ("/srv/lic/seat-b.lic", "/etc/app/licence")
    );
    assert_eq!(m.options, ["bind", "ro", "nosuid", "nodev", "noexec"]);
    assert_eq!(b.edits.env[0].name, "LICENCE_FILE");
    assert_eq!(b.edits.env[0].value, "/etc/app/licence");
    assert!(b.edits.device_nodes.is_empty() && b.edits.hooks.is_empty());
    for d in &devs {
        assert!(!d.edits.mounts[0].source.contains("evil"));
    }
}

#[test]
fn directories_as_devices_with_their_size() {
    let n = node(
        r#"
[[files]]
dir = "/srv/lic"
entries = "directories"
name_prefix = "data-"
read_write = true
exec = true
attributes = { type = "shard" }
"#,
    );
    // Read-write: below a directory closed to group and others.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        n.root.path().join("srv"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    let devs = discover(&n);
    assert_eq!(devs.len(), 1);
    let d = &devs[0];
    assert_eq!(d.name, "data-shard-0");
    assert_eq!(d.kind, Kind::Entry(EntryType::Directory));
    assert_eq!(d.capacity["size"], "10");
    let m = &d.edits.mounts[0];
    assert_eq!(m.destination, "/srv/lic/shard-0");
    assert_eq!(m.options, ["bind", "rw", "nosuid", "nodev"]);
    assert_eq!(d.edits.env[0].name, "GRAFT_FILE_DATA_SHARD_0");
}

#[test]
fn a_served_directory_reached_through_a_symlink_is_not_served() {
    let n = node(LICENCES.replace("/srv/lic", "/srv/alias").as_str());
    symlink("lic", n.root.path().join("srv/alias")).unwrap();
    assert!(discover(&n).is_empty());
    // Absent: nothing, and no error (it may appear later).
    let n = node(LICENCES.replace("/srv/lic", "/srv/later").as_str());
    assert!(discover(&n).is_empty());
}

#[test]
fn bad_configs_name_the_entry_and_field() {
    for (body, want) in [
        (
            "dir = \"/srv/../etc\"",
            "files[0] (/srv/../etc): dir: must be a clean",
        ),
        (
            "dir = \"/\"",
            "dir: must be a clean absolute path other than /",
        ),
        ("dir = \"/dev/shm\"", "dir: nothing under /dev is served"),
        (
            "dir = \"/srv/lic\"\npattern = \"a/*\"",
            "pattern: matches entry names",
        ),
        (
            "dir = \"/srv/lic\"\ncontainer_path = \"/proc/x\"",
            "container_path \"/proc/x\"",
        ),
        ("dir = \"/srv/lic\"\nenv = \"LD_PRELOAD\"", "LD_PRELOAD"),
        (
            "dir = \"/srv/lic\"\nentries = \"fifos\"",
            "unknown variant `fifos`",
        ),
    ] {
        let typed = if body.contains("attributes") {
            body.to_string()
        } else {
            format!("{body}\nattributes = {{ type = \"t\" }}")
        };
        let n = node(&format!("[[files]]\n{typed}\n"));
        let err = FilesDiscovery::new(n.config.clone(), n.root.path().into(), &["/".into()])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains(want), "{body}: {err}");
    }
    let n = node("[[files]]\ndir = \"/srv/lic\"\n");
    let err = FilesDiscovery::new(n.config.clone(), n.root.path().into(), &["/srv".into()])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("attributes.type: required"), "{err}");
    // A directory graft-nri would refuse to mount from is refused here, at start.
    let n = node(LICENCES);
    let err = FilesDiscovery::new(n.config.clone(), n.root.path().into(), &["/data".into()])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("GRAFT_ALLOWED_MOUNT_ROOTS"), "{err}");
}

#[test]
fn the_char_backend_reads_the_same_file() {
    let n = node(&format!("[[devices]]\npath = \"/dev/null\"\n{LICENCES}"));
    let c = crate::char::CharDiscovery::new(n.config.clone(), "/sys".into(), "/".into()).unwrap();
    assert_eq!(c.discover().unwrap().len(), 1);
    assert_eq!(discover(&n).len(), 3);
}

#[test]
fn names_from_entries() {
    assert_eq!(device_name(None, "Seat_01.lic").unwrap(), "seat-01-lic");
    assert_eq!(device_name(Some("lic-"), "--a").unwrap(), "lic-a");
    assert!(device_name(None, "...").is_err());
    assert!(device_name(None, &"a".repeat(64)).is_err());
}

#[test]
fn prepare_refuses_an_entry_that_changed() {
    use graft_driver_core::claims::setup_port::{DeviceSetup, NoSetup};
    let n = node(LICENCES);
    let devs = discover(&n);
    let check = ServedEntries {
        inner: std::sync::Arc::new(NoSetup),
        host_root: n.root.path().into(),
    };
    assert!(check
        .plan(&devs[0], None, &Default::default())
        .unwrap()
        .is_none());
    let lic = n.root.path().join("srv/lic");
    // Swapped for a symlink to a secret.
    std::fs::remove_file(lic.join("seat-b.lic")).unwrap();
    symlink("/etc/shadow", lic.join("seat-b.lic")).unwrap();
    let err = check
        .plan(&devs[1], None, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("seat-b-lic") && err.contains("symlink"),
        "{err}"
    );
    // Gone.
    std::fs::remove_file(lic.join("seat-c.lic")).unwrap();
    let err = check
        .plan(&devs[2], None, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("seat-c.lic"), "{err}");
    // Now a directory.
    std::fs::remove_file(lic.join("Seat_A.lic")).unwrap();
    std::fs::create_dir(lic.join("Seat_A.lic")).unwrap();
    let err = check
        .plan(&devs[0], None, &Default::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("is now a directory"), "{err}");
}

/// A served directory that another account could change is refused as a whole: no device,
/// the path, owner and mode in the reason, and the gauge counts it.
#[test]
fn a_directory_another_account_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let n = node(LICENCES);
    let lic = n.root.path().join("srv/lic");
    let gauge = prometheus_client::metrics::gauge::Gauge::default();
    let files = FilesDiscovery::new(n.config.clone(), n.root.path().into(), &["/srv".into()])
        .unwrap()
        .with_refusals(RefusedDirs::with_gauge(gauge.clone()));
    assert_eq!(files.discover().unwrap().len(), 3);
    assert_eq!(gauge.get(), 0);
    let mut cases = vec![(0o777, None), (0o1777, None), (0o775, None)];
    if nix::unistd::geteuid().is_root() {
        // Owned by nobody, as an unprivileged account's own directory would be.
        cases.push((0o755, Some(65534)));
    }
    for (mode, owner) in cases {
        std::fs::set_permissions(&lic, std::fs::Permissions::from_mode(mode)).unwrap();
        if let Some(uid) = owner {
            std::os::unix::fs::chown(&lic, Some(uid), None).unwrap();
        }
        assert!(files.discover().unwrap().is_empty(), "{mode:o} {owner:?}");
        let refused = files.refused();
        let reason = &refused["/srv/lic"];
        assert!(
            reason.contains(&format!("mode {mode:04o}"))
                && reason.contains(&format!(
                    "uid {}",
                    owner.unwrap_or(nix::unistd::geteuid().as_raw())
                ))
                && reason.contains("/srv/lic"),
            "{reason}"
        );
        assert_eq!(gauge.get(), 1);
        // And an Event on the Node.
        let parts = files.unavailable();
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].reason, "ServedDirectoryRefused");
        assert!(parts[0].message.contains(reason.as_str()), "{:?}", parts[0]);
    }
    // An ancestor counts as much as the directory.
    std::os::unix::fs::chown(&lic, Some(nix::unistd::geteuid().as_raw()), None).unwrap();
    std::fs::set_permissions(&lic, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        n.root.path().join("srv"),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    assert!(files.discover().unwrap().is_empty());
    assert!(
        files.refused()["/srv/lic"].contains("/srv is owned"),
        "{:?}",
        files.refused()
    );
    std::fs::set_permissions(
        n.root.path().join("srv"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    assert_eq!(files.discover().unwrap().len(), 3);
    assert_eq!(gauge.get(), 0);
    assert!(files.unavailable().is_empty());
}

/// Read-write entries only below a directory closed to group and others: a host user must
/// not reach what a container plants there (a setuid binary, a device node).
#[test]
fn read_write_needs_a_private_directory_above() {
    use std::os::unix::fs::PermissionsExt;
    let rw = LICENCES.replace("env = \"LICENCE_FILE\"", "read_write = true");
    let n = node(&rw);
    let files =
        FilesDiscovery::new(n.config.clone(), n.root.path().into(), &["/srv".into()]).unwrap();
    assert!(files.discover().unwrap().is_empty());
    assert!(
        files.refused()["/srv/lic"].contains("read-write"),
        "{:?}",
        files.refused()
    );
    // The served directory itself closed, or one above it: served.
    for private in ["srv/lic", "srv"] {
        let p = n.root.path().join(private);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        let devs = files.discover().unwrap();
        assert_eq!(devs.len(), 3, "{private}");
        assert!(devs[0].edits.mounts[0].options.contains(&"rw".to_string()));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}
