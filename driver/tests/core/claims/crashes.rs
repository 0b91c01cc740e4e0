//! The driver killed between any two durable steps: the next process (a new core over the
//! same state directory, the same kernel) loses no claim, leaks no setup or record, and
//! never gives a device to two claims.

use super::*;
use graft_driver::claims::checkpoint;
use graft_driver::claims::lifecycle::Stage;
use CrashPoint::*;

const PREPARE_POINTS: [CrashPoint; 4] = [AfterStarted, AfterSetup, AfterRecord, AfterCompleted];
const VFIO_0: &str = "0000:01:00.0";

/// A node whose first driver was killed at `point` while preparing claim `a`
/// (fuse + vfio-0), and the driver started after it.
fn killed_preparing(point: CrashPoint) -> (Node, Core) {
    let node = Node::new();
    let first = node.start_with(Some(point), BOOT);
    let e = first
        .prepare(vec![claim("a", &["fuse", "vfio-0"])], soon())
        .unwrap_err();
    assert!(is_crash(e, point), "{point:?}");
    drop(first);
    let next = node.start();
    (node, next)
}

/// Nothing of claim `a` is left anywhere.
fn gone(node: &Node, core: &Core, point: CrashPoint) {
    assert_eq!(core.stage("a").unwrap(), Stage::Absent, "{point:?}");
    assert!(core.record("a").unwrap().is_none(), "{point:?}");
    assert!(node.applied().is_empty(), "{point:?}: setup leaked");
}

#[test]
fn after_a_killed_prepare_the_device_stays_with_its_claim() {
    for point in PREPARE_POINTS {
        let (_node, core) = killed_preparing(point);
        let want = if point == AfterCompleted {
            Stage::Completed
        } else {
            Stage::Started
        };
        assert_eq!(core.stage("a").unwrap(), want, "{point:?}");
        let out = prepare(&core, vec![claim("b", &["vfio-0"])]);
        assert!(
            matches!(claim_error(&out["b"]), ClaimError::AlreadyPrepared { holder_uid, .. } if holder_uid == "a"),
            "{point:?}: {out:?}"
        );
    }
}

#[test]
fn the_retried_prepare_finishes_a_killed_one_and_unprepare_leaves_nothing() {
    for point in PREPARE_POINTS {
        let (node, core) = killed_preparing(point);
        let out = prepare(&core, vec![claim("a", &["fuse", "vfio-0"])]);
        assert_eq!(
            devices_of(&out, "a"),
            Ok(vec!["fuse".into(), "vfio-0".into()]),
            "{point:?}"
        );
        assert_eq!(core.stage("a").unwrap(), Stage::Completed, "{point:?}");
        let rec = core.record("a").unwrap().expect("record");
        assert_eq!(
            rec.pods[0].containers[0].devices,
            ["fuse", "vfio-0"],
            "{point:?}"
        );
        assert_eq!(
            node.applied(),
            BTreeSet::from([VFIO_0.to_string()]),
            "{point:?}"
        );

        assert!(unprepare(&core, &["a"])["a"].is_ok(), "{point:?}");
        gone(&node, &core, point);
        assert!(
            prepare(&core, vec![claim("b", &["vfio-0"])])["b"].is_ok(),
            "{point:?}"
        );
    }
}

#[test]
fn a_killed_prepare_can_be_unprepared_straight_away() {
    for point in PREPARE_POINTS {
        let (node, core) = killed_preparing(point);
        assert!(unprepare(&core, &["a"])["a"].is_ok(), "{point:?}");
        gone(&node, &core, point);
    }
}

#[test]
fn cleanup_rolls_back_a_killed_prepare_whose_claim_is_gone() {
    for point in PREPARE_POINTS {
        let (node, core) = killed_preparing(point);
        let started = core.started_claims().unwrap();
        if point == AfterCompleted {
            // Completed: the kubelet unprepares it; cleanup leaves it alone.
            assert!(started.is_empty());
            assert_eq!(core.roll_back_gone(&[id("a")], soon()).unwrap(), 0);
            assert_eq!(core.stage("a").unwrap(), Stage::Completed);
            continue;
        }
        assert_eq!(started, [id("a")], "{point:?}");
        assert_eq!(
            core.roll_back_gone(&started, soon()).unwrap(),
            1,
            "{point:?}"
        );
        gone(&node, &core, point);
    }
}

#[test]
fn a_killed_unprepare_is_finished_by_the_next_one() {
    for point in [UnprepareAfterUndo, UnprepareAfterRecord] {
        let node = Node::new();
        let first = node.start_with(Some(point), BOOT);
        assert!(prepare(&first, vec![claim("a", &["fuse", "vfio-0"])])["a"].is_ok());
        let e = first.unprepare(&[id("a")], soon()).unwrap_err();
        assert!(is_crash(e, point), "{point:?}");
        drop(first);

        let core = node.start();
        // The entry is there until the unprepare finishes: the device is still taken.
        assert_eq!(core.stage("a").unwrap(), Stage::Completed, "{point:?}");
        let out = prepare(&core, vec![claim("b", &["vfio-0"])]);
        assert!(matches!(
            claim_error(&out["b"]),
            ClaimError::AlreadyPrepared { .. }
        ));

        assert!(unprepare(&core, &["a"])["a"].is_ok(), "{point:?}");
        gone(&node, &core, point);
        assert!(
            prepare(&core, vec![claim("b", &["vfio-0"])])["b"].is_ok(),
            "{point:?}"
        );
    }
}

#[test]
fn a_new_boot_starts_with_no_claims_and_no_records() {
    let node = Node::new();
    let core = node.start();
    assert!(prepare(&core, vec![claim("a", &["fuse"])])["a"].is_ok());
    drop(core);
    let core = node.start_with(None, "boot-2");
    assert_eq!(core.stage("a").unwrap(), Stage::Absent);
    assert!(core.record("a").unwrap().is_none());
    assert!(prepare(&core, vec![claim("b", &["fuse"])])["b"].is_ok());
}

#[test]
fn a_corrupt_checkpoint_is_rebuilt_from_the_records() {
    let node = Node::new();
    let core = node.start();
    assert!(prepare(&core, vec![claim("a", &["fuse", "vfio-0"])])["a"].is_ok());
    drop(core);
    let dir = checkpoint::default_dir(node.dir.path());
    for slot in ["checkpoint-a.json", "checkpoint-b.json"] {
        let p = dir.join(slot);
        if p.exists() {
            std::fs::write(&p, b"{\"torn").unwrap();
        }
    }
    let core = node.start();
    assert_eq!(core.stage("a").unwrap(), Stage::Completed);
    let out = prepare(&core, vec![claim("b", &["vfio-0"])]);
    assert!(matches!(
        claim_error(&out["b"]),
        ClaimError::AlreadyPrepared { .. }
    ));
    assert!(unprepare(&core, &["a"])["a"].is_ok());
    assert!(core.record("a").unwrap().is_none());
}

#[test]
fn a_record_the_checkpoint_does_not_hold_is_removed_at_start() {
    let node = Node::new();
    let core = node.start();
    assert!(prepare(&core, vec![claim("a", &["fuse"])])["a"].is_ok());
    let store = graft_record::RecordStore::open(node.dir.path()).unwrap();
    let mut stray = store.get_claim("a").unwrap().unwrap();
    stray.claim.uid = "stray".into();
    store.put_claim(&stray).unwrap();
    drop(core);
    let core = node.start();
    assert!(core.record("stray").unwrap().is_none());
    assert!(core.record("a").unwrap().is_some());
}
