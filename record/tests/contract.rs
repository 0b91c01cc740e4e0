//! Round-trip, compatibility and store tests for the record contract.

use std::path::Path;

use graft_record::*;

const POD: &str = "5e0c9a8b-1d2f-4e3a-8b7c-6d5e4f3a2b10";

fn fixture() -> Vec<u8> {
    fixture_named("claim-v1.json")
}

fn fixture_named(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
    .expect("fixture")
}

/// (pod uid, [(container, [device])]).
type PodSpec<'a> = (&'a str, &'a [(&'a str, &'a [&'a str])]);
/// A damage to a record and the field the error must name.
type Case = (fn(&mut ClaimRecord), &'static str);

fn record(claim_uid: &str, pods: &[PodSpec]) -> ClaimRecord {
    ClaimRecord {
        version: FORMAT_VERSION,
        claim: ClaimRef {
            uid: claim_uid.into(),
            namespace: "ns".into(),
            name: format!("claim-{claim_uid}"),
        },
        devices: vec![DeviceRecord {
            name: "d0".into(),
            pool: "node".into(),
            requests: vec!["r".into()],
            edits: ContainerEdits {
                device_nodes: vec![DeviceNode {
                    path: "/dev/d0".into(),
                    kind: DeviceKind::Char,
                    major: 10,
                    minor: 259,
                    file_mode: Some(0o600),
                    uid: None,
                    gid: None,
                }],
                env: vec![EnvVar {
                    name: "D0".into(),
                    value: "yes".into(),
                }],
                ..Default::default()
            },
        }],
        env: Vec::new(),
        pods: pods
            .iter()
            .map(|(uid, ctrs)| PodRecord {
                uid: uid.to_string(),
                namespace: "ns".into(),
                name: format!("pod-{uid}"),
                containers: ctrs
                    .iter()
                    .map(|(n, d)| ContainerRecord {
                        name: n.to_string(),
                        devices: d.iter().map(|s| s.to_string()).collect(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

#[test]
fn v1_fixture_parses_and_resolves_per_container() {
    let rec =
        parse_record(Path::new("fixture"), &fixture()).expect("v1 fixture must stay readable");
    assert_eq!(rec.version, 1);
    assert_eq!(rec.claim.name, "pod-a-fuse-x7k2p");
    let app: Vec<_> = rec
        .devices_for(POD, "app")
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(app, ["fuse", "tun"]);
    let init: Vec<_> = rec
        .devices_for(POD, "init-net")
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(init, ["tun"]);
    assert!(rec.devices_for(POD, "sidecar").is_empty());
    assert!(rec.devices_for("other-pod", "app").is_empty());
    let fuse = &rec.devices[0].edits;
    assert_eq!(fuse.device_nodes[0].kind, DeviceKind::Char);
    assert_eq!(fuse.device_nodes[0].file_mode, Some(0o666));
    assert_eq!(fuse.hooks[0].stage, HookStage::CreateContainer);
    // Defaults for omitted fields.
    assert_eq!(rec.devices[1].edits.device_nodes[0].file_mode, None);
}

#[test]
fn round_trip_is_lossless() {
    let rec = parse_record(Path::new("fixture"), &fixture()).unwrap();
    let again = serde_json::to_vec(&rec).unwrap();
    assert_eq!(parse_record(Path::new("x"), &again).unwrap(), rec);
    let generated = record("c1", &[("p1", &[("a", &["d0"])])]);
    let bytes = serde_json::to_vec_pretty(&generated).unwrap();
    assert_eq!(parse_record(Path::new("x"), &bytes).unwrap(), generated);
}

#[test]
fn unknown_fields_of_v1_are_ignored() {
    let mut v: serde_json::Value = serde_json::from_slice(&fixture()).unwrap();
    v["written_by"] = "graft-driver 0.2".into();
    v["devices"][0]["edits"]["device_nodes"][0]["note"] = "x".into();
    parse_record(Path::new("x"), &serde_json::to_vec(&v).unwrap()).unwrap();
}

/// Version 2: the claim's own env, stored once, reaches every container that receives any
/// of its devices, before their devices' variables; a container that receives none of the
/// claim's devices gets none of it.
#[test]
fn v2_fixture_gives_the_claims_env_once_per_container() {
    let data = fixture_named("claim-v2.json");
    let rec = parse_record(Path::new("fixture"), &data).expect("v2 fixture must parse");
    assert_eq!(rec.version, 2);
    assert_eq!(rec.needed_version(), 2);
    let names: Vec<_> = rec
        .env_for(POD, "app")
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(names, ["LICENSE_SERVER", "SEAT_POOL"]);
    assert!(rec.env_for(POD, "helper").is_empty());
    assert!(rec.env_for("other-pod", "app").is_empty());
    // Written back, it is the same record.
    let again = serde_json::to_vec_pretty(&rec).unwrap();
    assert_eq!(parse_record(Path::new("x"), &again).unwrap(), rec);
    // The v1 fixture needs nothing newer, so a writer keeps it at version 1.
    let v1 = parse_record(Path::new("fixture"), &fixture()).unwrap();
    assert!(v1.env.is_empty());
    assert_eq!(v1.needed_version(), 1);
}

/// A claim's env in a version-1 record, or a variable set both by the claim and by one of
/// its devices, is refused by name.
#[test]
fn claim_env_is_refused_where_its_meaning_would_be_unclear() {
    let mut v: serde_json::Value = serde_json::from_slice(&fixture_named("claim-v2.json")).unwrap();
    v["version"] = 1.into();
    let err = parse_record(Path::new("x"), &serde_json::to_vec(&v).unwrap()).unwrap_err();
    assert!(err.to_string().contains("needs record version 2"), "{err}");
    let mut v: serde_json::Value = serde_json::from_slice(&fixture_named("claim-v2.json")).unwrap();
    v["env"][0]["name"] = "SEAT".into();
    let err = parse_record(Path::new("x"), &serde_json::to_vec(&v).unwrap()).unwrap_err();
    assert!(
        err.to_string()
            .contains("both by the claim and by the device"),
        "{err}"
    );
    let mut v: serde_json::Value = serde_json::from_slice(&fixture_named("claim-v2.json")).unwrap();
    v["env"][0]["name"] = "LD_PRELOAD".into();
    let err = parse_record(Path::new("x"), &serde_json::to_vec(&v).unwrap()).unwrap_err();
    assert!(err.to_string().contains("LD_PRELOAD"), "{err}");
}

#[test]
fn unknown_version_is_refused_by_name() {
    let mut v: serde_json::Value = serde_json::from_slice(&fixture()).unwrap();
    v["version"] = 3.into();
    let err = parse_record(Path::new("x"), &serde_json::to_vec(&v).unwrap()).unwrap_err();
    assert!(
        matches!(err, RecordError::UnknownVersion { version: 3, .. }),
        "{err}"
    );
    // Even when the newer shape does not parse as v1.
    let err = parse_record(Path::new("x"), br#"{"version": 7, "claims": []}"#).unwrap_err();
    assert!(
        matches!(err, RecordError::UnknownVersion { version: 7, .. }),
        "{err}"
    );
}

#[test]
fn corrupt_is_refused() {
    let data = fixture();
    let err = parse_record(Path::new("x"), &data[..data.len() / 2]).unwrap_err();
    assert!(matches!(err, RecordError::Corrupt { .. }), "{err}");
    let err = parse_record(Path::new("x"), b"").unwrap_err();
    assert!(matches!(err, RecordError::Corrupt { .. }), "{err}");
}

#[test]
fn invalid_requests_are_refused_naming_the_field() {
    let cases: Vec<Case> = vec![
        (
            |r| r.devices[0].edits.device_nodes[0].path = "/etc/shadow".into(),
            "device_nodes[0].path",
        ),
        (
            |r| r.devices[0].edits.device_nodes[0].path = "/dev/../etc/x".into(),
            "device_nodes[0].path",
        ),
        (
            |r| r.devices[0].edits.device_nodes[0].path = "dev/x".into(),
            "device_nodes[0].path",
        ),
        (
            |r| r.devices[0].edits.device_nodes[0].major = -1,
            "device_nodes[0]",
        ),
        (
            |r| {
                r.devices[0].edits.mounts.push(Mount {
                    source: "/a".into(),
                    destination: "relative/dest".into(),
                    kind: "bind".into(),
                    options: vec![],
                })
            },
            "mounts[0].destination",
        ),
        (
            |r| r.devices[0].edits.env[0].name = "A=B".into(),
            "env[0].name",
        ),
        (
            |r| r.devices[0].edits.env[0].name = String::new(),
            "env[0].name",
        ),
        (
            |r| r.pods[0].containers[0].devices = vec!["nope".into()],
            "pods[0].containers[0](a).devices",
        ),
        (
            |r| {
                let again = r.pods[0].containers[0].clone();
                r.pods[0].containers.push(again)
            },
            "pods[0].containers[1].name",
        ),
        (|r| r.pods[0].uid = "../etc".into(), "pods[0].uid"),
        (|r| r.claim.uid = "a/b".into(), "claim.uid"),
    ];
    for (mutate, field) in cases {
        let mut rec = record("c1", &[("p1", &[("a", &["d0"])])]);
        mutate(&mut rec);
        let err = validate_record(&rec).unwrap_err();
        assert!(
            err.field.contains(field),
            "expected field {field}, got {err}"
        );
        // The same record on disk is refused on read.
        let bytes = serde_json::to_vec(&rec).unwrap();
        assert!(matches!(
            parse_record(Path::new("x"), &bytes),
            Err(RecordError::Invalid { .. })
        ));
    }
}

#[test]
fn store_indexes_by_pod_and_follows_changes() {
    let dir = tempfile::tempdir().unwrap();
    let store = RecordStore::open(dir.path()).unwrap();
    assert!(store.pod_claims("p1").unwrap().is_empty());

    store
        .put_claim(&record("c1", &[("p1", &[("a", &["d0"])])]))
        .unwrap();
    store
        .put_claim(&record(
            "c2",
            &[("p1", &[("b", &["d0"])]), ("p2", &[("a", &["d0"])])],
        ))
        .unwrap();
    let p1: Vec<_> = store
        .pod_claims("p1")
        .unwrap()
        .into_iter()
        .map(|r| r.claim.uid)
        .collect();
    assert_eq!(p1, ["c1", "c2"]);
    assert_eq!(store.pod_claims("p2").unwrap().len(), 1);

    // The shared claim drops p1: only its index entry goes.
    store
        .put_claim(&record("c2", &[("p2", &[("a", &["d0"])])]))
        .unwrap();
    let p1: Vec<_> = store
        .pod_claims("p1")
        .unwrap()
        .into_iter()
        .map(|r| r.claim.uid)
        .collect();
    assert_eq!(p1, ["c1"]);

    assert!(store.remove_claim("c1").unwrap());
    assert!(!store.remove_claim("c1").unwrap());
    assert!(store.pod_claims("p1").unwrap().is_empty());
    assert!(
        !dir.path().join("pods/p1").exists(),
        "empty pod index directories are removed"
    );
    let mut uids = store.claim_uids().unwrap();
    uids.sort();
    assert_eq!(uids, ["c2"]);
    assert_eq!(store.get_claim("c2").unwrap().unwrap().pods[0].uid, "p2");
    assert!(store.get_claim("c1").unwrap().is_none());
}

#[test]
fn store_refuses_invalid_records_and_fails_closed_on_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let store = RecordStore::open(dir.path()).unwrap();
    let mut bad = record("c1", &[("p1", &[("a", &["d0"])])]);
    bad.devices[0].edits.device_nodes[0].path = "/tmp/x".into();
    assert!(matches!(
        store.put_claim(&bad),
        Err(RecordError::Rejected { .. })
    ));
    assert!(store.pod_claims("p1").unwrap().is_empty());

    store
        .put_claim(&record("c1", &[("p1", &[("a", &["d0"])])]))
        .unwrap();
    std::fs::write(dir.path().join("claims/c1.json"), b"{\"version\": 1, \"cla").unwrap();
    let err = store.pod_claims("p1").unwrap_err();
    assert!(err.to_string().contains("c1.json"), "{err}");
    // A pod that does not hold the corrupt claim is unaffected.
    assert!(store.pod_claims("p2").unwrap().is_empty());
    // The writer can still replace or remove it.
    store
        .put_claim(&record("c1", &[("p3", &[("a", &["d0"])])]))
        .unwrap();
    assert!(store.pod_claims("p1").unwrap().is_empty());
    assert_eq!(store.pod_claims("p3").unwrap().len(), 1);
}

/// Planted at a record's name: a FIFO (refused at once, never waited on), a symlink to a
/// valid record, a file over the cap. Each fails its pod closed, naming the file and why.
#[test]
fn records_are_read_without_blocking_following_or_unbounded_size() {
    let dir = tempfile::tempdir().unwrap();
    let store = RecordStore::open(dir.path()).unwrap();
    let good = record("c9", &[("p9", &[("a", &["d0"])])]);
    store.put_claim(&good).unwrap();
    let plant = |uid: &str, how: &dyn Fn(&Path)| {
        std::fs::create_dir_all(dir.path().join(format!("pods/{uid}"))).unwrap();
        std::fs::write(dir.path().join(format!("pods/{uid}/{uid}")), b"").unwrap();
        how(&dir.path().join(format!("claims/{uid}.json")));
    };
    plant("fifo", &|p| {
        nix::unistd::mkfifo(p, nix::sys::stat::Mode::S_IRUSR).unwrap()
    });
    let target = dir.path().join("claims/c9.json");
    plant("link", &|p| std::os::unix::fs::symlink(&target, p).unwrap());
    plant("big", &|p| {
        std::fs::write(p, vec![b' '; (read::SMALL_FILE_CAP + 1) as usize]).unwrap()
    });
    // The pod index is not followed through a symlink either.
    std::os::unix::fs::symlink(dir.path().join("pods/p9"), dir.path().join("pods/linked")).unwrap();
    let e = store.pod_claims("linked").unwrap_err().to_string();
    assert!(e.contains("linked") && e.contains("symlink"), "{e}");
    let started = std::time::Instant::now();
    for (uid, why) in [
        ("fifo", "not a regular file"),
        ("link", "symlink"),
        ("big", "larger than"),
    ] {
        let e = store.pod_claims(uid).unwrap_err().to_string();
        assert!(e.contains(&format!("{uid}.json")) && e.contains(why), "{e}");
        assert!(store.get_claim(uid).is_err());
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(store.pod_claims("p9").unwrap(), vec![good]);
}

#[test]
fn dangling_index_entries_are_skipped_and_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let store = RecordStore::open(dir.path()).unwrap();
    store
        .put_claim(&record("c1", &[("p1", &[("a", &["d0"])])]))
        .unwrap();
    // A crash between removing the record and its marker.
    std::fs::remove_file(dir.path().join("claims/c1.json")).unwrap();
    assert!(store.pod_claims("p1").unwrap().is_empty());
    assert_eq!(store.repair_index().unwrap(), 1);
    assert!(!dir.path().join("pods/p1").exists());
    // A marker lost with the page cache is restored from the record that names it.
    store
        .put_claim(&record("c2", &[("p2", &[("a", &["d0"])])]))
        .unwrap();
    std::fs::remove_file(dir.path().join("pods/p2/c2")).unwrap();
    assert!(store.pod_claims("p2").unwrap().is_empty());
    assert_eq!(store.repair_index().unwrap(), 1);
    assert_eq!(store.pod_claims("p2").unwrap().len(), 1);
    // No temp files are left behind by writes.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("claims"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
        .collect();
    assert!(leftovers.is_empty());
}

#[test]
fn status_reports_readiness_and_liveness() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    match nri_readiness(root, "boot-1").unwrap() {
        NriReadiness::NotReady(why) => assert!(why.contains("never run"), "{why}"),
        r => panic!("{r:?}"),
    }
    let mut publisher = StatusPublisher::acquire(root, "10-graft", "boot-1".into()).unwrap();
    assert!(plugin_alive(root).unwrap());
    assert!(
        StatusPublisher::acquire(root, "10-graft", "boot-1".into()).is_err(),
        "one instance per state dir"
    );
    assert!(matches!(
        nri_readiness(root, "boot-1").unwrap(),
        NriReadiness::NotReady(_)
    ));
    publisher
        .update(|s| {
            s.connected = true;
            s.runtime_name = "containerd".into();
            s.runtime_version = "v2.2.7".into();
            s.message = None;
        })
        .unwrap();
    match nri_readiness(root, "boot-1").unwrap() {
        NriReadiness::NotReady(why) => assert!(why.contains("synchronized"), "{why}"),
        r => panic!("{r:?}"),
    }
    publisher.update(|s| s.synchronized = true).unwrap();
    match nri_readiness(root, "boot-1").unwrap() {
        NriReadiness::Ready(s) => {
            assert_eq!(s.runtime_version, "v2.2.7");
            assert_eq!(s.pid, std::process::id());
        }
        r => panic!("{r:?}"),
    }
    assert!(matches!(
        nri_readiness(root, "boot-2").unwrap(),
        NriReadiness::NotReady(_)
    ));
    drop(publisher);
    match nri_readiness(root, "boot-1").unwrap() {
        NriReadiness::NotReady(why) => assert!(why.contains("not running"), "{why}"),
        r => panic!("{r:?}"),
    }
}

#[test]
fn a_record_stored_under_another_claims_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = RecordStore::open(dir.path()).unwrap();
    store
        .put_claim(&record("c1", &[("p1", &[("a", &["d0"])])]))
        .unwrap();
    std::fs::copy(
        dir.path().join("claims/c1.json"),
        dir.path().join("claims/c2.json"),
    )
    .unwrap();
    let err = store.get_claim("c2").unwrap_err();
    assert!(err.to_string().contains("another claim's name"), "{err}");
    assert!(store.get_claim("c1").unwrap().is_some());
}
