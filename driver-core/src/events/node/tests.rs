use std::path::PathBuf;

use super::*;
use crate::discovery::config::load_config;

fn note(ev: &Event) -> &str {
    ev.note.as_deref().unwrap_or_default()
}

#[test]
fn a_bad_devices_toml_names_the_file_and_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("devices.toml");
    std::fs::write(&path, "[[devices]]\npath = \"/dev/fuse\"\nbogus = 1\n").unwrap();
    let err = load_config(&path).unwrap_err();
    // As start-up sees it: under a backend's error, under context.
    let err = anyhow::Error::from(BackendError::from(err)).context("opening the char family");
    let ev = startup_failure(err.as_ref()).expect("a config Event");
    assert_eq!(ev.reason, DEVICE_CONFIG_INVALID);
    assert_eq!(ev.type_, EventType::Warning);
    let n = note(&ev);
    assert!(
        n.contains("devices.toml") && n.contains("line 3") && n.contains("bogus"),
        "{n}"
    );
    assert!(n.contains("cannot start"), "{n}");
}

#[test]
fn a_refused_entry_names_the_entry_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("devices.toml");
    std::fs::write(&path, "[[files]]\ndir = \"/srv/x\"\n").unwrap();
    let err = BackendError::from(load_config(&path).unwrap_err());
    let ev = startup_failure(&err).expect("a config Event");
    let n = note(&ev);
    assert!(
        n.contains("files[0] (/srv/x)") && n.contains("attributes.type"),
        "{n}"
    );
    // At run time, the backend's last devices stay.
    let ev = config_invalid("files", &err.to_string(), 3);
    assert_eq!(ev.reason, DEVICE_CONFIG_INVALID);
    assert!(note(&ev).contains("last 3 device(s)"), "{}", note(&ev));
}

#[test]
fn a_failed_hook_install_is_told_and_other_failures_are_not() {
    let io = std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        "read-only file system",
    );
    let err = anyhow::Error::from(BackendError::step("nvidia", INSTALLING_HOOK, io));
    let ev = startup_failure(err.as_ref()).expect("a hook Event");
    assert_eq!(ev.reason, HOOK_INSTALL_FAILED);
    assert!(note(&ev).contains("read-only file system"), "{}", note(&ev));
    let other = BackendError::step("nvidia", "reading the checkpoint's MIG instances", "x");
    assert!(startup_failure(&other).is_none());
    assert!(startup_failure(anyhow::anyhow!("no Kubernetes client").as_ref()).is_none());
}

#[test]
fn a_rebuilt_checkpoint_says_what_was_kept_and_lost() {
    let mut r = Rebuilt {
        moved_to: PathBuf::from("state/checkpoint-a.json.corrupt-1"),
        reason: "checksum mismatch".into(),
        from_earlier_boot: false,
        rebuilt: 2,
        removed: 0,
    };
    let ev = checkpoint_rebuilt(&r);
    assert_eq!(ev.reason, CHECKPOINT_REBUILT);
    assert_eq!(ev.type_, EventType::Warning);
    let n = note(&ev).to_string();
    for want in [
        "checksum mismatch",
        "corrupt-1",
        "2 claim(s) kept",
        "cannot undo",
    ] {
        assert!(n.contains(want), "{want}: {n}");
    }
    r.from_earlier_boot = true;
    r.removed = 4;
    let n = note(&checkpoint_rebuilt(&r)).to_string();
    assert!(
        n.contains("before this boot") && n.contains("4 claim record(s)"),
        "{n}"
    );
}

#[test]
fn a_failed_state_disk_says_what_failed_and_what_stops() {
    let ev = state_disk_failed("fdatasync /var/lib/graft/claims: Input/output error (os error 5)");
    assert_eq!(ev.reason, STATE_DISK_FAILED);
    assert_eq!(ev.type_, EventType::Warning);
    let n = note(&ev).to_string();
    for want in ["/var/lib/graft", "Input/output error", "prepares no claim"] {
        assert!(n.contains(want), "{want}: {n}");
    }
}
