//! Setup records across checkpoint schemas: a state directory written by schema 5's driver
//! (tests/fixtures/checkpoint-v5, the closed enum's last schema) and one written by schema
//! 6's (tests/fixtures/checkpoint-v6, a record naming its family) read by today's core,
//! each record sent to its family and every claim unprepared; and what a record that cannot
//! be read fails: its claim's unprepare when its family cannot read it, the whole file only
//! when it has no kind.

use std::path::Path;

use super::old_checkpoints::{copy_fixture, slots, FIXTURE_BOOT};
use super::*;
use graft_driver::backend::router::{Route, Router};
use graft_driver::claims::checkpoint::{self, Checkpoint};
use graft_driver::claims::lifecycle::Stage;

/// Undoes the nvidia family's records as the family reads them, and keeps each.
#[derive(Default)]
struct Nvidia {
    undone: Mutex<Vec<NvidiaWork>>,
}

impl DeviceSetup for Nvidia {
    fn plan(
        &self,
        _: &Device,
        _: Option<&DeviceConfig>,
        _: &Allocated,
    ) -> Result<Option<Setup>, SetupError> {
        Ok(None)
    }

    fn apply(&self, _: &Setup) -> Result<Option<ContainerEdits>, SetupError> {
        Err(SetupError::NoBackend)
    }

    fn undo(&self, setup: &Setup) -> Result<(), SetupError> {
        let work = NvidiaWork::read(setup)?;
        self.undone.lock().unwrap().push(work);
        Ok(())
    }
}

/// The payload of the `example` family's records.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Widget {
    kind: String,
    slot: u32,
    mode: String,
}

/// The `example` family: undoes its widgets, and keeps each with its payload's version.
#[derive(Default)]
struct Example {
    undone: Mutex<Vec<(u32, Widget)>>,
}

impl DeviceSetup for Example {
    fn plan(
        &self,
        _: &Device,
        _: Option<&DeviceConfig>,
        _: &Allocated,
    ) -> Result<Option<Setup>, SetupError> {
        Ok(None)
    }

    fn apply(&self, _: &Setup) -> Result<Option<ContainerEdits>, SetupError> {
        Err(SetupError::NoBackend)
    }

    fn undo(&self, setup: &Setup) -> Result<(), SetupError> {
        let widget = setup.decode::<Widget>("example")?;
        self.undone.lock().unwrap().push((setup.version(), widget));
        Ok(())
    }
}

/// A core over the state directory `dir`, whose setups are `setup`.
fn core(dir: &Path, setup: Arc<dyn DeviceSetup>) -> Core {
    Core::new("graft.dev", NODE, dir.to_path_buf(), FIXTURE_BOOT)
        .unwrap()
        .with_setup(setup)
        .with_opaque(graft_driver::families::opaque())
        .with_gate(Box::new(Gate(Ok(()))))
}

/// `fixture` copied into a new state directory, both slots of schema `version`.
fn restore(fixture: &str, version: u64) -> tempfile::TempDir {
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(fixture);
    let dir = tempfile::tempdir().unwrap();
    copy_fixture(&from, dir.path());
    // As the driver that wrote it left them: a regenerated fixture would be today's schema.
    for (name, slot) in slots(dir.path()) {
        assert_eq!(slot["version"], version, "{name}");
        assert_eq!(slot["bootId"], FIXTURE_BOOT, "{name}");
    }
    dir
}

/// The newest slot on disk.
fn newest(dir: &Path) -> serde_json::Value {
    let slots = slots(dir);
    slots
        .into_values()
        .max_by_key(|s| s["seq"].as_u64())
        .unwrap()
}

/// Every record the checkpoint holds, by claim, as read; and each of the nvidia family's
/// written again as today's family writes it: byte for byte what the file holds.
fn records(dir: &Path) -> BTreeMap<String, Vec<Option<Setup>>> {
    let cp = Checkpoint::new(checkpoint::default_dir(dir), FIXTURE_BOOT).unwrap();
    let read: BTreeMap<String, Vec<Option<Setup>>> = cp
        .peek()
        .unwrap()
        .into_iter()
        .map(|(uid, e)| (uid, e.devices.into_iter().map(|d| d.setup).collect()))
        .collect();
    for s in read.values().flatten().flatten() {
        if s.family().is_none() {
            let again = NvidiaWork::read(s).unwrap().record().unwrap();
            assert_eq!(
                serde_json::to_string(&again).unwrap(),
                serde_json::to_string(s).unwrap()
            );
        }
    }
    read
}

const DOMAIN: &str = "5f0c8e3a-2b7d-4e91-a6c4-d18f3b2e7a90";
const MIG_GPU: &str = "GPU-0b9f1c2e-6a51-4c3d-9e7a-2f0d1c5b8a41";

fn vfio_with_peer() -> NvidiaWork {
    NvidiaWork::Vfio {
        pci_bus_id: "0000:18:00.0".into(),
        persistence: true,
        peers: vec![VfioPeer {
            pci_bus_id: "0000:18:00.1".into(),
            driver: Some("snd_hda_intel".into()),
            persistence: false,
        }],
    }
}

fn mig() -> NvidiaWork {
    NvidiaWork::Mig {
        gpu_uuid: MIG_GPU.into(),
        profile: 19,
        start: 0,
        size: 1,
        slices: 1,
    }
}

fn daemon() -> NvidiaWork {
    NvidiaWork::ImexDaemon {
        domain_id: DOMAIN.into(),
        domain_name: "train".into(),
        domain_namespace: "ns".into(),
        clique: "c1.0".into(),
        claim_namespace: "ns".into(),
    }
}

/// The nvidia setups schema 5's driver recorded, by claim, as the family reads them.
fn v5_setups() -> BTreeMap<&'static str, Vec<Option<NvidiaWork>>> {
    BTreeMap::from([
        ("daemon", vec![Some(daemon())]),
        (
            "domain",
            vec![Some(NvidiaWork::ComputeDomain {
                domain_id: DOMAIN.into(),
                domain_name: "train".into(),
                domain_namespace: "ns".into(),
                claim_namespace: "ns".into(),
                channel: Some(1),
                clique: "c1.0".into(),
                all_channels: false,
            })],
        ),
        ("mig", vec![Some(mig())]),
        (
            "mps",
            vec![Some(NvidiaWork::Mps {
                gpu_uuid: "GPU-7d3e2a10-58c4-4f6b-b1d9-0e4c7a9f2b63".into(),
                minor: 1,
                mig: None,
                share: "share-mps".into(),
                compute: 50,
                memory_mib: Some(4096),
                namespace: "ns".into(),
                claim_uid: "mps".into(),
            })],
        ),
        ("plain", vec![None]),
        (
            "timeslice",
            vec![Some(NvidiaWork::TimeSlice {
                pci_bus_id: "0000:3b:00.0".into(),
                interval: 3,
            })],
        ),
        ("vfio", vec![Some(vfio_with_peer())]),
    ])
}

#[test]
fn restores_a_schema_5_checkpoint_and_unprepares_every_claim() {
    let dir = restore("checkpoint-v5", 5);
    let nvidia = Arc::new(Nvidia::default());
    let core = core(dir.path(), nvidia.clone());
    // Read as it is: not quarantined and rebuilt from the records, which would lose the setups.
    assert_eq!(core.startup().unwrap(), None);
    let want = v5_setups();
    let read: BTreeMap<String, Vec<Option<NvidiaWork>>> = records(dir.path())
        .into_iter()
        .map(|(uid, setups)| {
            let works = setups
                .iter()
                .map(|s| s.as_ref().map(|s| NvidiaWork::read(s).unwrap()))
                .collect();
            (uid, works)
        })
        .collect();
    assert_eq!(
        read,
        want.iter()
            .map(|(u, w)| (u.to_string(), w.clone()))
            .collect()
    );
    let uids: Vec<&str> = want.keys().copied().collect();
    for uid in &uids {
        assert_eq!(core.stage(uid).unwrap(), Stage::Completed, "{uid}");
        assert!(core.record(uid).unwrap().is_some(), "{uid}");
    }

    // One claim gone, the rest rewritten: still schema 5, which a rolled-back driver reads.
    assert!(unprepare(&core, &["plain"])["plain"].is_ok());
    assert_eq!(newest(dir.path())["version"], 5);
    let out = unprepare(&core, &uids);
    assert!(out.values().all(Result::is_ok), "{out:?}");
    let undone: Vec<NvidiaWork> = uids
        .iter()
        .flat_map(|u| want[u].clone())
        .flatten()
        .collect();
    assert_eq!(*nvidia.undone.lock().unwrap(), undone);
    for uid in &uids {
        assert_eq!(core.stage(uid).unwrap(), Stage::Absent, "{uid}");
        assert!(core.record(uid).unwrap().is_none(), "{uid}");
    }
    let last = newest(dir.path());
    assert_eq!(last["claims"], serde_json::json!({}), "{last}");
    assert_eq!(last["version"], 1, "{last}");
}

#[test]
fn restores_a_schema_6_checkpoint_and_sends_each_record_to_its_family() {
    let dir = restore("checkpoint-v6", 6);
    let (nvidia, example) = (Arc::new(Nvidia::default()), Arc::new(Example::default()));
    let router = Router::new(vec![
        Route {
            family: "example",
            kinds: |_| false,
            unnamed: false,
            setup: example.clone(),
        },
        Route {
            family: "nvidia",
            kinds: |_| false,
            unnamed: true,
            setup: nvidia.clone(),
        },
    ]);
    let core = core(dir.path(), Arc::new(router));
    assert_eq!(core.startup().unwrap(), None);
    let widget = Widget {
        kind: "widget".into(),
        slot: 0,
        mode: "exclusive".into(),
    };
    let read = records(dir.path());
    let named = Setup::new(Some("example"), 2, &widget).unwrap();
    assert_eq!(read["widget"], vec![Some(named.clone()), None]);
    // The family's record, written again, is byte for byte the file's.
    assert_eq!(
        serde_json::to_string(read["widget"][0].as_ref().unwrap()).unwrap(),
        serde_json::to_string(&named).unwrap()
    );
    let nvidias = BTreeMap::from([
        ("daemon", daemon()),
        ("mig", mig()),
        ("vfio", vfio_with_peer()),
    ]);
    for (uid, work) in &nvidias {
        assert_eq!(read[*uid], vec![Some(work.record().unwrap())], "{uid}");
    }

    // The nvidia claims gone first: the widget's record still needs schema 6.
    let out = unprepare(&core, &["daemon", "mig", "vfio"]);
    assert!(out.values().all(Result::is_ok), "{out:?}");
    assert_eq!(newest(dir.path())["version"], 6);
    assert!(example.undone.lock().unwrap().is_empty());
    let out = unprepare(&core, &["widget"]);
    assert!(out["widget"].is_ok(), "{out:?}");
    let undone: Vec<NvidiaWork> = nvidias.into_values().collect();
    assert_eq!(*nvidia.undone.lock().unwrap(), undone);
    assert_eq!(*example.undone.lock().unwrap(), vec![(2, widget)]);
    for uid in ["daemon", "mig", "vfio", "widget"] {
        assert_eq!(core.stage(uid).unwrap(), Stage::Absent, "{uid}");
    }
    let last = newest(dir.path());
    assert_eq!(last["claims"], serde_json::json!({}), "{last}");
    assert_eq!(last["version"], 1, "{last}");
}

/// Plans, by device name, a record as given (`bad-0`'s a MIG record with a GPU uuid that
/// is no string), and sets nothing up.
struct Given;

impl DeviceSetup for Given {
    fn plan(
        &self,
        device: &Device,
        _: Option<&DeviceConfig>,
        _: &Allocated,
    ) -> Result<Option<Setup>, SetupError> {
        Ok(match device.name.as_str() {
            "bad-0" => Some(serde_json::from_str(r#"{"kind":"mig","gpuUuid":7}"#).unwrap()),
            "mig-0" => Some(mig().record().unwrap()),
            _ => None,
        })
    }

    fn apply(&self, _: &Setup) -> Result<Option<ContainerEdits>, SetupError> {
        Ok(None)
    }

    fn undo(&self, _: &Setup) -> Result<(), SetupError> {
        Ok(())
    }
}

/// A state directory whose checkpoint holds claim `bad` (device `bad-0`, a record its
/// family cannot read) and claim `good` (a MIG instance), both prepared.
fn with_a_bad_record() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let core = core(dir.path(), Arc::new(Given));
    core.set_inventory(&[char_device("bad-0", 1), char_device("mig-0", 2)]);
    core.startup().unwrap();
    let out = prepare(
        &core,
        vec![claim("bad", &["bad-0"]), claim("good", &["mig-0"])],
    );
    assert!(out.values().all(Result::is_ok), "{out:?}");
    dir
}

#[test]
fn a_record_its_family_cannot_read_fails_only_its_claims_unprepare() {
    let dir = with_a_bad_record();
    let nvidia = Arc::new(Nvidia::default());
    let core = core(dir.path(), nvidia.clone());
    // The file is read: nothing moved aside, nothing rebuilt.
    assert_eq!(core.startup().unwrap(), None);
    let out = unprepare(&core, &["bad", "good"]);
    assert!(out["good"].is_ok(), "{out:?}");
    assert_eq!(*nvidia.undone.lock().unwrap(), vec![mig()]);
    match claim_error(&out["bad"]) {
        e @ ClaimError::UnreadableSetup { claim, device, .. } => {
            assert_eq!((claim.as_str(), device.as_str()), ("ns/claim-bad", "bad-0"));
            let text = e.to_string();
            assert!(
                text.contains("claim ns/claim-bad")
                    && text.contains("nvidia setup record of kind mig")
                    && text.contains("invalid type: integer `7`"),
                "{text}"
            );
        }
        other => panic!("{other}"),
    }
    // The claim stays prepared, its entry kept for a driver that can read it.
    assert_eq!(core.stage("bad").unwrap(), Stage::Completed);
    assert_eq!(core.stage("good").unwrap(), Stage::Absent);
    assert!(unprepare(&core, &["bad"])["bad"].is_err());
    assert_eq!(core.stage("bad").unwrap(), Stage::Completed);
}

#[test]
fn a_record_without_a_kind_moves_the_file_aside() {
    let dir = with_a_bad_record();
    let cp_dir = checkpoint::default_dir(dir.path());
    for name in ["checkpoint-a.json", "checkpoint-b.json"] {
        let path = cp_dir.join(name);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(r#""kind":"mig","gpuUuid":7"#), "{text}");
        std::fs::write(
            &path,
            text.replace(r#""kind":"mig","gpuUuid":7"#, r#""gpuUuid":7"#),
        )
        .unwrap();
    }
    let cp = Checkpoint::new(&cp_dir, FIXTURE_BOOT).unwrap();
    let q = cp.open().unwrap().quarantined.unwrap();
    assert!(
        q.reason.contains("not a checkpoint") && q.reason.contains("has no kind"),
        "{}",
        q.reason
    );
    assert!(q.moved_to.exists());
    assert!(cp.begin().unwrap().claims().is_empty());
}
