//! The checkpoint's schema versions: a file of an older version is read and kept at the
//! oldest version that holds what it has; a newer one is moved aside. NVIDIA's setups are
//! the records that need the newer versions.

use std::collections::BTreeMap;

use graft_driver::claims::checkpoint::{
    checksum, Checkpoint, ClaimEntry, ClaimState, PreparedDevice, CHECKPOINT_VERSION,
};
use graft_driver::discovery::nvidia::setup::{NvidiaWork, VfioPeer};

fn entry(state: ClaimState) -> ClaimEntry {
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

/// The claims of a checkpoint as version 1 (before dynamic MIG) wrote them: a completed
/// claim holding a GPU passed through with VFIO.
const V1_CLAIMS: &str = r#"{"u1":{"state":"PrepareCompleted","namespace":"ns","name":"c","devices":[{"pool":"node1","device":"vfio-0000-18-00-0","requests":["gpu"],"setup":{"kind":"vfio","pciBusId":"0000:18:00.0"}}]}}"#;

fn mig_entry() -> ClaimEntry {
    ClaimEntry {
        devices: vec![PreparedDevice {
            device: "gpu-7-mig-3g-40gb-4".into(),
            setup: Some(
                NvidiaWork::Mig {
                    gpu_uuid: "GPU-x".into(),
                    profile: 2,
                    start: 4,
                    size: 4,
                    slices: 3,
                }
                .record()
                .unwrap(),
            ),
            ..entry(ClaimState::PrepareStarted).devices[0].clone()
        }],
        ..entry(ClaimState::PrepareStarted)
    }
}

/// `V1_CLAIMS` in slot a, under schema `version`, with a valid checksum.
fn write_v1_claims(cp: &Checkpoint, version: u32) {
    let claims: BTreeMap<String, ClaimEntry> = serde_json::from_str(V1_CLAIMS).unwrap();
    let file = format!(
        r#"{{"version":{version},"seq":3,"bootId":"b","checksum":"{}","claims":{V1_CLAIMS}}}"#,
        checksum(&claims)
    );
    std::fs::write(&cp.paths()[0], file).unwrap();
}

fn version_of(cp: &Checkpoint) -> u64 {
    let newest = cp
        .paths()
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .filter_map(|d| serde_json::from_slice::<serde_json::Value>(&d).ok())
        .max_by_key(|v| v["seq"].as_u64())
        .unwrap();
    newest["version"].as_u64().unwrap()
}

#[test]
fn a_version_1_file_is_read_and_stays_version_1_until_it_holds_a_mig_instance() {
    let dir = tempfile::tempdir().unwrap();
    let cp = Checkpoint::new(dir.path(), "b").unwrap();
    write_v1_claims(&cp, 1);
    let report = cp.open().unwrap();
    assert!(report.quarantined.is_none());
    let mut t = cp.begin().unwrap();
    let e = t.get("u1").unwrap().clone();
    assert_eq!(
        e.devices[0].setup,
        Some(NvidiaWork::vfio("0000:18:00.0").record().unwrap())
    );
    // Rewritten without a MIG instance: still version 1, which an older driver reads.
    t.put("u2", entry(ClaimState::PrepareCompleted)).unwrap();
    assert_eq!(version_of(&cp), 1);
    // A MIG instance needs version 2; gone again, version 1.
    t.put("u3", mig_entry()).unwrap();
    assert_eq!(version_of(&cp), 2);
    assert_eq!(t.get("u3").unwrap(), &mig_entry());
    t.remove("u3").unwrap();
    assert_eq!(version_of(&cp), 1);
    // A VFIO setup with IOMMU group peers or persistence mode to restore needs version 3,
    // and reads back whole.
    t.put("u4", group_entry()).unwrap();
    assert_eq!(version_of(&cp), 3);
    let again = cp.peek().unwrap();
    assert_eq!(again["u4"], group_entry());
    t.remove("u4").unwrap();
    assert_eq!(version_of(&cp), 1);
    // A ComputeDomain channel's setup needs version 4.
    t.put("u5", domain_entry()).unwrap();
    assert_eq!(version_of(&cp), 4);
    assert_eq!(cp.peek().unwrap()["u5"], domain_entry());
    t.remove("u5").unwrap();
    assert_eq!(version_of(&cp), 1);
    // Its channel number and an IMEX daemon place's domain need version 5.
    let mut bound = domain_entry();
    let mut work = NvidiaWork::read(bound.devices[0].setup.as_ref().unwrap()).unwrap();
    if let NvidiaWork::ComputeDomain { channel, .. } = &mut work {
        *channel = Some(1);
    }
    bound.devices[0].setup = Some(work.record().unwrap());
    t.put("u6", bound.clone()).unwrap();
    assert_eq!(version_of(&cp), 5);
    assert_eq!(cp.peek().unwrap()["u6"], bound);
    t.remove("u6").unwrap();
    assert_eq!(version_of(&cp), 1);
}

fn domain_entry() -> ClaimEntry {
    ClaimEntry {
        devices: vec![PreparedDevice {
            setup: Some(
                NvidiaWork::ComputeDomain {
                    domain_id: "0b6f7c1e-5d1a-4f7e-9a43-2f1c1d7b2a10".into(),
                    domain_name: "train".into(),
                    domain_namespace: "team-a".into(),
                    claim_namespace: "team-a".into(),
                    channel: None,
                    clique: String::new(),
                    all_channels: false,
                }
                .record()
                .unwrap(),
            ),
            ..entry(ClaimState::PrepareCompleted).devices[0].clone()
        }],
        ..entry(ClaimState::PrepareCompleted)
    }
}

fn group_entry() -> ClaimEntry {
    ClaimEntry {
        devices: vec![PreparedDevice {
            setup: Some(
                NvidiaWork::Vfio {
                    pci_bus_id: "0000:18:00.0".into(),
                    persistence: true,
                    peers: vec![VfioPeer {
                        pci_bus_id: "0000:18:00.1".into(),
                        driver: Some("snd_hda_intel".into()),
                        persistence: false,
                    }],
                }
                .record()
                .unwrap(),
            ),
            ..entry(ClaimState::PrepareCompleted).devices[0].clone()
        }],
        ..entry(ClaimState::PrepareCompleted)
    }
}

#[test]
fn a_newer_version_is_moved_aside_not_misread() {
    let dir = tempfile::tempdir().unwrap();
    let cp = Checkpoint::new(dir.path(), "b").unwrap();
    write_v1_claims(&cp, CHECKPOINT_VERSION + 1);
    let q = cp.open().unwrap().quarantined.unwrap();
    let want = format!("schema version {}", CHECKPOINT_VERSION + 1);
    assert!(q.reason.contains(&want), "{}", q.reason);
}
