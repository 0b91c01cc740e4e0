//! The family's records: written as checkpoint schema 5 wrote them, each with the schema
//! it needs, read back only when the family's own, and the core's questions answered.

use serde_json::json;

use super::super::answers;
use super::*;

fn daemon(domain: &str) -> NvidiaWork {
    NvidiaWork::ImexDaemon {
        domain_id: domain.into(),
        domain_name: format!("name-{domain}"),
        domain_namespace: "graft".into(),
        clique: "c1.0".into(),
        claim_namespace: String::new(),
    }
}

fn grouped() -> NvidiaWork {
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

fn mps() -> NvidiaWork {
    NvidiaWork::Mps {
        gpu_uuid: "GPU-1".into(),
        minor: 1,
        mig: None,
        share: "s".into(),
        compute: 50,
        memory_mib: None,
        namespace: String::new(),
        claim_uid: String::new(),
    }
}

#[test]
fn each_kind_is_written_as_schema_5_wrote_it_with_the_schema_it_needs() {
    let cases = [
        (
            NvidiaWork::vfio("0000:18:00.0"),
            r#"{"kind":"vfio","pciBusId":"0000:18:00.0"}"#,
            1,
        ),
        (
            grouped(),
            r#"{"kind":"vfio","pciBusId":"0000:18:00.0","persistence":true,"peers":[{"pciBusId":"0000:18:00.1","driver":"snd_hda_intel"}]}"#,
            3,
        ),
        (
            NvidiaWork::TimeSlice {
                pci_bus_id: "0000:3b:00.0".into(),
                interval: 3,
            },
            r#"{"kind":"timeSlice","pciBusId":"0000:3b:00.0","interval":3}"#,
            1,
        ),
        (
            NvidiaWork::Mig {
                gpu_uuid: "GPU-1".into(),
                profile: 19,
                start: 0,
                size: 1,
                slices: 1,
            },
            r#"{"kind":"mig","gpuUuid":"GPU-1","profile":19,"start":0,"size":1,"slices":1}"#,
            2,
        ),
        (
            mps(),
            r#"{"kind":"mps","gpuUuid":"GPU-1","minor":1,"share":"s","compute":50,"namespace":"","claimUid":""}"#,
            2,
        ),
        (
            NvidiaWork::ComputeDomain {
                domain_id: "u".into(),
                domain_name: "d".into(),
                domain_namespace: "ns".into(),
                claim_namespace: "ns".into(),
                channel: None,
                clique: String::new(),
                all_channels: false,
            },
            r#"{"kind":"computeDomain","domainId":"u","domainName":"d","domainNamespace":"ns","claimNamespace":"ns"}"#,
            4,
        ),
        (
            NvidiaWork::ComputeDomain {
                domain_id: "u".into(),
                domain_name: "d".into(),
                domain_namespace: "ns".into(),
                claim_namespace: "ns".into(),
                channel: Some(1),
                clique: "c1.0".into(),
                all_channels: true,
            },
            r#"{"kind":"computeDomain","domainId":"u","domainName":"d","domainNamespace":"ns","claimNamespace":"ns","channel":1,"clique":"c1.0","allChannels":true}"#,
            5,
        ),
        (
            daemon("u"),
            r#"{"kind":"imexDaemon","domainId":"u","domainName":"name-u","domainNamespace":"graft","clique":"c1.0","claimNamespace":""}"#,
            5,
        ),
    ];
    for (work, text, schema) in cases {
        let record = work.record().unwrap();
        assert_eq!(serde_json::to_string(&record).unwrap(), text);
        assert_eq!(
            (record.family(), record.version()),
            (None, schema),
            "{text}"
        );
        let back: Setup = serde_json::from_str(text).unwrap();
        assert_eq!(NvidiaWork::read(&back).unwrap(), work);
    }
}

#[test]
fn only_the_familys_own_records_are_read() {
    let vfio = json!({"kind": "vfio", "pciBusId": "0000:18:00.0"});
    let named = Setup::new(Some(FAMILY), 1, &vfio).unwrap();
    assert_eq!(
        NvidiaWork::read(&named).unwrap(),
        NvidiaWork::vfio("0000:18:00.0")
    );
    let other = Setup::new(Some("acme"), 1, &vfio).unwrap();
    let e = NvidiaWork::read(&other).unwrap_err();
    assert!(matches!(e, SetupError::Unreadable { .. }), "{e}");
    assert!(e.to_string().contains("the acme family's"), "{e}");
    let unknown: Setup = serde_json::from_str(r#"{"kind":"teleport"}"#).unwrap();
    let e = NvidiaWork::read(&unknown).unwrap_err();
    assert!(e.to_string().contains("kind teleport"), "{e}");
    // Among the checkpoint's setups: its own, readable ones only.
    let own = NvidiaWork::own(&[named, other, unknown, mps().record().unwrap()]);
    assert_eq!(own, vec![NvidiaWork::vfio("0000:18:00.0"), mps()]);
}

#[test]
fn the_cores_questions_are_answered_from_the_record() {
    // The claim's namespace and uid stamped.
    let stamped = answers::for_claim(mps().record().unwrap(), "team-a", "c1").unwrap();
    assert!(matches!(
        NvidiaWork::read(&stamped).unwrap(),
        NvidiaWork::Mps { namespace, claim_uid, .. } if namespace == "team-a" && claim_uid == "c1"
    ));
    // The functions passthrough takes, or the one a time slice reconfigures.
    let taken = answers::pci(&grouped().record().unwrap()).unwrap();
    assert_eq!(taken.functions, ["0000:18:00.0", "0000:18:00.1"]);
    assert!(taken.passthrough);
    let slice = NvidiaWork::TimeSlice {
        pci_bus_id: "0000:3b:00.0".into(),
        interval: 1,
    };
    let used = answers::pci(&slice.record().unwrap()).unwrap();
    assert_eq!(
        (used.functions, used.passthrough),
        (vec!["0000:3b:00.0".into()], false)
    );
    assert_eq!(answers::pci(&mps().record().unwrap()), None);
    let unreadable: Setup = serde_json::from_str(r#"{"kind":"vfio"}"#).unwrap();
    assert_eq!(answers::pci(&unreadable), None);
    // One domain's IMEX daemon place at a time.
    let (a, b) = (daemon("a").record().unwrap(), daemon("b").record().unwrap());
    let e = answers::excludes(&a, &b).unwrap();
    assert!(
        matches!(e.family::<NvidiaSetupError>(), Some(NvidiaSetupError::ComputeDomain { reason, .. })
            if reason.contains("domain uid b")),
        "{e}"
    );
    assert!(answers::excludes(&a, &daemon("a").record().unwrap()).is_none());
    assert!(answers::excludes(&a, &mps().record().unwrap()).is_none());
}
