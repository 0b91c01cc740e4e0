//! The checkpoint's slots, checks and lock.

use super::*;

pub(super) fn entry(state: ClaimState) -> ClaimEntry {
    ClaimEntry {
        state,
        namespace: "ns".into(),
        name: "c".into(),
        devices: vec![PreparedDevice {
            pool: "node1".into(),
            device: "fuse".into(),
            requests: vec!["r".into()],
            share_id: None,
            admin_access: false,
            setup: None,
        }],
    }
}

#[test]
fn round_trip_and_remove() {
    let dir = tempfile::tempdir().unwrap();
    let cp = Checkpoint::new(dir.path(), "boot-a").unwrap();
    let mut t = cp.begin().unwrap();
    t.put("u1", entry(ClaimState::PrepareStarted)).unwrap();
    t.put("u2", entry(ClaimState::PrepareCompleted)).unwrap();
    t.remove("u1").unwrap();
    drop(t);
    let t = cp.begin().unwrap();
    assert_eq!(t.claims().len(), 1);
    assert_eq!(t.get("u2").unwrap().state, ClaimState::PrepareCompleted);
}

#[test]
fn other_boot_is_discarded() {
    let dir = tempfile::tempdir().unwrap();
    let old = Checkpoint::new(dir.path(), "boot-a").unwrap();
    old.begin()
        .unwrap()
        .put("u1", entry(ClaimState::PrepareCompleted))
        .unwrap();
    let new = Checkpoint::new(dir.path(), "boot-b").unwrap();
    let report = new.open().unwrap();
    let (boot, claims) = report.discarded_other_boot.unwrap();
    assert_eq!((boot.as_str(), claims.len()), ("boot-a", 1));
    assert!(new.begin().unwrap().claims().is_empty());
}

#[test]
fn tampered_file_is_moved_aside() {
    let dir = tempfile::tempdir().unwrap();
    let cp = Checkpoint::new(dir.path(), "b").unwrap();
    cp.begin()
        .unwrap()
        .put("u1", entry(ClaimState::PrepareCompleted))
        .unwrap();
    for p in cp.paths().iter().filter(|p| p.exists()) {
        let text = std::fs::read_to_string(p).unwrap();
        std::fs::write(p, text.replace("fuse", "tun")).unwrap();
    }
    let report = cp.open().unwrap();
    let q = report.quarantined.unwrap();
    assert!(q.reason.contains("checksum"), "{}", q.reason);
    assert!(q.moved_to.exists());
    assert!(!q.from_earlier_boot);
    assert!(cp.begin().unwrap().claims().is_empty());
}

#[test]
fn a_torn_write_falls_back_to_the_other_slot() {
    let dir = tempfile::tempdir().unwrap();
    let cp = Checkpoint::new(dir.path(), "b").unwrap();
    let mut t = cp.begin().unwrap();
    t.put("u1", entry(ClaimState::PrepareStarted)).unwrap();
    t.put("u1", entry(ClaimState::PrepareCompleted)).unwrap();
    drop(t);
    // The newer slot (the second write) is cut short, as by a crash mid-write.
    let newer = &cp.paths()[1];
    let text = std::fs::read(newer).unwrap();
    std::fs::write(newer, &text[..text.len() / 2]).unwrap();
    let t = cp.begin().unwrap();
    assert_eq!(t.get("u1").unwrap().state, ClaimState::PrepareStarted);
    assert!(t.report.quarantined.is_none());
}

#[test]
fn second_instance_waits_for_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let a = Checkpoint::new(dir.path(), "b").unwrap();
    let b = a.clone();
    let held = a.begin().unwrap();
    let waiter = std::thread::spawn(move || {
        let start = Instant::now();
        let _t = b.begin().unwrap();
        start.elapsed()
    });
    std::thread::sleep(Duration::from_millis(150));
    drop(held);
    assert!(waiter.join().unwrap() >= Duration::from_millis(100));
}

#[test]
fn a_peek_moves_nothing_aside() {
    let dir = tempfile::tempdir().unwrap();
    let cp = Checkpoint::new(dir.path(), "b").unwrap();
    cp.begin()
        .unwrap()
        .put("u1", entry(ClaimState::PrepareCompleted))
        .unwrap();
    assert_eq!(cp.peek().unwrap().len(), 1);
    assert!(Checkpoint::new(dir.path(), "other-boot")
        .unwrap()
        .peek()
        .unwrap()
        .is_empty());
    // Damaged: the peek sees nothing, and start-up still finds (and reports) the damage.
    for p in cp.paths().iter().filter(|p| p.exists()) {
        std::fs::write(p, b"{\"version\": 1, \"cla").unwrap();
    }
    assert!(cp.peek().unwrap().is_empty());
    let q = cp.open().unwrap().quarantined.unwrap();
    assert!(q.reason.contains("not a checkpoint"), "{}", q.reason);
}
