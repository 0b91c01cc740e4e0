//! A state directory written by an older driver (tests/fixtures/checkpoint-v4: schema 4,
//! written by commit 0397bb4's core) read by today's: after an upgrade on a node, every
//! claim the old driver prepared is still known, and unpreparing it undoes its setups.

use std::path::Path;

use super::*;
use graft_driver::claims::checkpoint::{self, Checkpoint};
use graft_driver::claims::lifecycle::Stage;

/// The boot the fixture was written in: a checkpoint of another boot is discarded.
pub(super) const FIXTURE_BOOT: &str = "boot-1";
/// The claims the fixture holds, each prepared to completion.
const UIDS: [&str; 5] = ["domain", "mig", "mixed", "mps", "plain"];

/// Records every setup undone; applying one is a bug here, since nothing is prepared.
#[derive(Default)]
struct Undos {
    applied: Mutex<Vec<Setup>>,
    undone: Mutex<Vec<Setup>>,
}

impl DeviceSetup for Undos {
    fn plan(
        &self,
        _: &Device,
        _: Option<&DeviceConfig>,
        _: &Allocated,
    ) -> Result<Option<Setup>, SetupError> {
        Ok(None)
    }

    fn apply(&self, setup: &Setup) -> Result<Option<ContainerEdits>, SetupError> {
        self.applied.lock().unwrap().push(setup.clone());
        Ok(None)
    }

    fn undo(&self, setup: &Setup) -> Result<(), SetupError> {
        self.undone.lock().unwrap().push(setup.clone());
        Ok(())
    }
}

/// The fixture's files copied into `to`, the state directory, keeping their layout.
pub(super) fn copy_fixture(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_fixture(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// The slot files' JSON, by name.
pub(super) fn slots(state: &Path) -> BTreeMap<String, serde_json::Value> {
    let dir = checkpoint::default_dir(state);
    ["checkpoint-a.json", "checkpoint-b.json"]
        .into_iter()
        .map(|n| {
            let text = std::fs::read_to_string(dir.join(n)).unwrap();
            (n.to_string(), serde_json::from_str(&text).unwrap())
        })
        .collect()
}

fn mig(start: u32) -> Setup {
    NvidiaWork::Mig {
        gpu_uuid: "GPU-0b9f1c2e-6a51-4c3d-9e7a-2f0d1c5b8a41".into(),
        profile: 19,
        start,
        size: 1,
        slices: 1,
    }
    .record()
    .unwrap()
}

/// The setups the old driver recorded, as today's schema reads them: fields added since
/// (a channel's number, clique and mode) take their defaults.
fn expected_setups() -> BTreeMap<&'static str, Vec<Option<Setup>>> {
    BTreeMap::from([
        (
            "domain",
            vec![Some(
                NvidiaWork::ComputeDomain {
                    domain_id: "5f0c8e3a-2b7d-4e91-a6c4-d18f3b2e7a90".into(),
                    domain_name: "train".into(),
                    domain_namespace: "ns".into(),
                    claim_namespace: "ns".into(),
                    channel: None,
                    clique: String::new(),
                    all_channels: false,
                }
                .record()
                .unwrap(),
            )],
        ),
        ("mig", vec![Some(mig(0))]),
        ("mixed", vec![Some(mig(1)), None]),
        (
            "mps",
            vec![Some(
                NvidiaWork::Mps {
                    gpu_uuid: "GPU-7d3e2a10-58c4-4f6b-b1d9-0e4c7a9f2b63".into(),
                    minor: 1,
                    mig: None,
                    share: "share-mps".into(),
                    compute: 50,
                    memory_mib: Some(4096),
                    namespace: "ns".into(),
                    claim_uid: "mps".into(),
                }
                .record()
                .unwrap(),
            )],
        ),
        ("plain", vec![None]),
    ])
}

#[test]
fn restores_a_schema_4_checkpoint_and_unprepares_every_claim() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/checkpoint-v4");
    let dir = tempfile::tempdir().unwrap();
    copy_fixture(&fixture, dir.path());
    // Both slots as the old driver left them: a regenerated fixture would not be version 4.
    for (name, slot) in slots(dir.path()) {
        assert_eq!(slot["version"], 4, "{name}");
        assert_eq!(slot["bootId"], FIXTURE_BOOT, "{name}");
    }

    let setup = Arc::new(Undos::default());
    let core = Core::new("graft.dev", NODE, dir.path().to_path_buf(), FIXTURE_BOOT)
        .unwrap()
        .with_setup(Arc::clone(&setup) as Arc<dyn DeviceSetup>)
        .with_opaque(graft_driver::families::opaque())
        .with_gate(Box::new(Gate(Ok(()))));
    // Read as it is: not quarantined and rebuilt from the records, which would lose the setups.
    assert_eq!(core.startup().unwrap(), None);
    let cp = Checkpoint::new(checkpoint::default_dir(dir.path()), FIXTURE_BOOT).unwrap();
    let claims = cp.peek().unwrap();
    let read: BTreeMap<&str, Vec<Option<Setup>>> = claims
        .iter()
        .map(|(uid, e)| {
            let setups = e.devices.iter().map(|d| d.setup.clone()).collect();
            (uid.as_str(), setups)
        })
        .collect();
    assert_eq!(read, expected_setups());
    for uid in UIDS {
        assert_eq!(core.stage(uid).unwrap(), Stage::Completed, "{uid}");
        assert!(core.record(uid).unwrap().is_some(), "{uid}");
    }

    let out = unprepare(&core, &UIDS);
    assert!(out.values().all(Result::is_ok), "{out:?}");
    // Each claim's setups undone once, its devices in reverse order, nothing set up again.
    let setups = expected_setups();
    let want: Vec<Setup> = UIDS
        .iter()
        .flat_map(|uid| setups[uid].iter().rev().flatten().cloned())
        .collect();
    assert_eq!(*setup.undone.lock().unwrap(), want);
    assert!(setup.applied.lock().unwrap().is_empty());

    for uid in UIDS {
        assert_eq!(core.stage(uid).unwrap(), Stage::Absent, "{uid}");
        assert!(core.record(uid).unwrap().is_none(), "{uid}");
    }
    assert!(cp.peek().unwrap().is_empty());
    // The newest slot on disk holds no claim.
    let slots = slots(dir.path());
    let newest = slots.values().max_by_key(|s| s["seq"].as_u64()).unwrap();
    assert_eq!(newest["claims"], serde_json::json!({}), "{newest}");
    drop(core);
    // And a restart finds nothing to hold either.
    let core = Core::new("graft.dev", NODE, dir.path().to_path_buf(), FIXTURE_BOOT).unwrap();
    assert_eq!(core.startup().unwrap(), None);
    assert!(UIDS.iter().all(|u| core.stage(u).unwrap() == Stage::Absent));
}
