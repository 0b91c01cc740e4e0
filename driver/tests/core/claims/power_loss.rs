//! A power loss, after each sync the prepare and unprepare paths no longer make
//! (graft-record's `durability`). A test leaves the state directory as the disk may hold it
//! when that sync is missing, every file dated before this boot as a disk's would be, and
//! starts the next boot's driver over it with the node's devices reset. The new boot holds
//! no claim and no record, graft-nri finds nothing for the pods, no temp file is left, and
//! the same devices prepare again. (A process killed at the same points keeps every write
//! in the page cache: `crashes.rs`.)

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::*;
use graft_driver::claims::checkpoint;
use graft_driver::claims::lifecycle::Stage;

const REBOOT: &str = "boot-2";
const SLOTS: [&str; 2] = ["checkpoint-a.json", "checkpoint-b.json"];

/// A named state a power loss may leave, made of a file or of the node's state directory.
type Leave<T> = (&'static str, fn(&T));

/// Boot 1: claim `a` (fuse, vfio-0) prepared, claim `b` (tun) prepared and unprepared,
/// with a copy of `b`'s record from before its removal.
fn boot_one() -> (Node, Vec<u8>) {
    let node = Node::new();
    let core = node.start();
    let out = prepare(
        &core,
        vec![claim("a", &["fuse", "vfio-0"]), claim("b", &["tun"])],
    );
    assert!(out["a"].is_ok() && out["b"].is_ok(), "{out:?}");
    let b = fs::read(claims_dir(&node).join("b.json")).unwrap();
    assert!(unprepare(&core, &["b"])["b"].is_ok());
    (node, b)
}

fn claims_dir(node: &Node) -> PathBuf {
    node.dir.path().join("claims")
}

fn slot(node: &Node, name: &str) -> PathBuf {
    checkpoint::default_dir(node.dir.path()).join(name)
}

/// The newest checkpoint slot boot 1 wrote.
fn newest_slot(node: &Node) -> PathBuf {
    SLOTS
        .iter()
        .map(|s| slot(node, s))
        .filter(|p| p.exists())
        .max_by_key(|p| fs::metadata(p).unwrap().modified().unwrap())
        .expect("a checkpoint slot")
}

/// Every file under `dir` dated well before this boot.
fn date_before_boot(dir: &Path) {
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_500_000_000);
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            date_before_boot(&p);
        } else {
            File::options()
                .write(true)
                .open(&p)
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
    }
}

/// The power goes while the disk holds what `leave` makes of the state directory; the next
/// boot's driver starts on it with the node's devices reset.
fn reboot(node: Node, leave: impl FnOnce(&Node)) -> (Node, Core) {
    leave(&node);
    date_before_boot(node.dir.path());
    let node = Node {
        dir: node.dir,
        setup: Arc::new(FakeSetup::default()),
    };
    let core = node.start_with(None, REBOOT);
    (node, core)
}

/// The new boot holds nothing of boot 1, and its devices prepare again.
fn starts_clean(node: &Node, core: &Core, case: &str) {
    for uid in ["a", "b"] {
        assert_eq!(core.stage(uid).unwrap(), Stage::Absent, "{case}: {uid}");
        assert!(core.record(uid).unwrap().is_none(), "{case}: {uid}");
    }
    let store = graft_record::RecordStore::open(node.dir.path()).unwrap();
    for pod in ["pod-a", "pod-b"] {
        assert!(store.pod_claims(pod).unwrap().is_empty(), "{case}: {pod}");
    }
    let left: Vec<String> = fs::read_dir(claims_dir(node))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(left.is_empty(), "{case}: left in claims/: {left:?}");
    let out = prepare(
        core,
        vec![claim("c", &["fuse", "vfio-0"]), claim("a", &["tun"])],
    );
    assert!(out["c"].is_ok() && out["a"].is_ok(), "{case}: {out:?}");
}

#[test]
fn a_record_whose_data_never_reached_the_disk_is_discarded() {
    // No fdatasync of the staged record: the renamed file may be empty or zeros.
    let cases: [Leave<Path>; 2] = [
        ("empty", |p| File::create(p).map(drop).unwrap()),
        ("zeros", |p| {
            let n = fs::metadata(p).unwrap().len() as usize;
            fs::write(p, vec![0u8; n]).unwrap()
        }),
    ];
    for (case, leave) in cases {
        let (node, _) = boot_one();
        let (node, core) = reboot(node, |n| leave(&claims_dir(n).join("a.json")));
        starts_clean(&node, &core, case);
    }
}

#[test]
fn a_rename_that_never_reached_the_disk_is_discarded() {
    // No sync of claims/ after the rename: the record is missing, its temp file (with
    // or without data) and its pod's marker may be there.
    for with_data in [true, false] {
        let case = format!("temp file with data: {with_data}");
        let (node, _) = boot_one();
        let (node, core) = reboot(node, |n| {
            let rec = claims_dir(n).join("a.json");
            let temp = claims_dir(n).join(".a.json.tmp.Xy12ab");
            if with_data {
                fs::rename(&rec, &temp).unwrap();
            } else {
                fs::remove_file(&rec).unwrap();
                File::create(&temp).unwrap();
            }
            assert!(n.dir.path().join("pods/pod-a/a").exists());
        });
        starts_clean(&node, &core, &case);
    }
}

#[test]
fn a_removal_that_never_reached_the_disk_is_discarded() {
    // No sync of claims/ after unprepare's removal: `b`'s record and marker are back.
    let (node, b) = boot_one();
    let (node, core) = reboot(node, |n| {
        fs::write(claims_dir(n).join("b.json"), &b).unwrap();
        fs::create_dir_all(n.dir.path().join("pods/pod-b")).unwrap();
        File::create(n.dir.path().join("pods/pod-b/b")).unwrap();
    });
    starts_clean(&node, &core, "record back");
}

#[test]
fn a_checkpoint_write_that_never_reached_the_disk_is_discarded() {
    // No fdatasync of the slot: the newest one empty, zeros, cut short, or both empty.
    let cases: [Leave<Node>; 4] = [
        ("newest empty", |n| {
            File::create(newest_slot(n)).map(drop).unwrap()
        }),
        ("newest zeros", |n| {
            let p = newest_slot(n);
            let len = fs::metadata(&p).unwrap().len() as usize;
            fs::write(&p, vec![0u8; len]).unwrap()
        }),
        ("newest cut short", |n| {
            let p = newest_slot(n);
            let len = fs::metadata(&p).unwrap().len();
            OpenOptions::new()
                .write(true)
                .open(&p)
                .unwrap()
                .set_len(len / 2)
                .unwrap()
        }),
        ("both empty", |n| {
            for s in SLOTS {
                if slot(n, s).exists() {
                    File::create(slot(n, s)).unwrap();
                }
            }
        }),
    ];
    for (case, leave) in cases {
        let (node, _) = boot_one();
        let (node, core) = reboot(node, leave);
        starts_clean(&node, &core, case);
    }
}

#[test]
fn a_checkpoint_whose_files_never_reached_the_disk_is_discarded() {
    // No sync of the checkpoint's directory after its slots were made: no slot at all,
    // while the records are there.
    let (node, _) = boot_one();
    let (node, core) = reboot(node, |n| {
        for s in SLOTS {
            let _ = fs::remove_file(slot(n, s));
        }
        assert!(claims_dir(n).join("a.json").exists());
    });
    starts_clean(&node, &core, "no slots");
}

#[test]
fn a_disk_that_failed_its_writeback_check_records_no_claim() {
    let node = Node::new();
    let core = node.start();
    core.writeback().fail_for_test("EIO");
    let out = prepare(&core, vec![claim("a", &["fuse", "vfio-0"])]);
    let e = devices_of(&out, "a").unwrap_err();
    assert!(e.contains("write-back check") && e.contains("EIO"), "{e}");
    // Nothing half done: no record, no setup, the device free once the disk passes.
    assert!(core.record("a").unwrap().is_none());
    assert!(node.applied().is_empty());
    core.writeback().check().unwrap();
    assert!(prepare(&core, vec![claim("b", &["vfio-0"])])["b"].is_ok());
}

#[test]
fn the_writeback_check_syncs_what_a_prepare_wrote() {
    let node = Node::new();
    let core = node.start();
    let check = core.writeback();
    check.check().unwrap();
    assert_eq!(check.pending(), 0);
    assert!(prepare(&core, vec![claim("a", &["fuse"])])["a"].is_ok());
    // The record, the claims directory, the pod's index directory and the pods directory.
    assert_eq!(check.pending(), 4);
    check.check().unwrap();
    assert_eq!(check.pending(), 0);
    assert!(unprepare(&core, &["a"])["a"].is_ok());
    assert!(check.pending() > 0, "the removal's directory");
    check.check().unwrap();
}
