//! The plan of each device kind and sharing, applied and undone against recording fakes.

use super::super::smi::Smi;
use super::super::vfio::tests::{FakeKernel, BDF};
use super::*;
use graft_driver_core::model::Attribute;
use graft_driver_core::opaque::{decode, OpaqueFamilies};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default, Clone)]
struct Recorded(Arc<Mutex<Vec<String>>>);

impl Smi for Recorded {
    fn run(&self, args: &[String]) -> Result<(), SetupError> {
        self.0.lock().unwrap().push(args.join(" "));
        Ok(())
    }
}

fn device(name: &str, kind_name: &str) -> Device {
    let kind = match kind_name {
        "gpu" => Kind::Whole,
        "mig" => Kind::Partition,
        "vfio" => Kind::Passthrough,
        "imex-channel" => Kind::Channel,
        _ => Kind::Char,
    };
    let mut attributes = BTreeMap::new();
    attributes.insert("type".into(), Attribute::String(kind_name.into()));
    attributes.insert("pciBusID".into(), Attribute::String(BDF.into()));
    Device {
        kind,
        name: name.into(),
        attributes,
        capacity: BTreeMap::new(),
        edits: ContainerEdits::default(),
        optional_edits: Default::default(),
        consumes: None,
        shared: None,
        binding: None,
    }
}

fn config(json: &str) -> DeviceConfig {
    let nvidia = OpaqueFamilies::new(vec![Arc::new(crate::opaque::NvidiaOpaqueFamily)]);
    decode(0, &serde_json::from_str(json).unwrap(), &nvidia).unwrap()
}

fn setup(k: &FakeKernel, dev: &Path, smi: Recorded) -> NvidiaSetup {
    NvidiaSetup {
        vfio: k.vfio(Duration::from_secs(5)),
        dev_root: dev.to_path_buf(),
        smi: Box::new(smi),
        persistence: Box::new(super::super::persistence::Untouched),
        rescan: Box::new(|| {}),
        mig: None,
        mps: None,
        domains: Default::default(),
    }
}

#[test]
fn a_plain_channel_is_refused_where_compute_domains_are_on() {
    let k = FakeKernel::start(false);
    let dev = tempfile::tempdir().unwrap();
    let mut s = setup(&k, dev.path(), Recorded::default());
    let ch = device("imex-channel-0", "imex-channel");
    // Off (a node without ComputeDomains): the plain channel class serves it.
    assert_eq!(s.plan(&ch, None, &Default::default()).unwrap(), None);
    s.domains = crate::domain::GateSlot::new(true);
    let e = s.plan(&ch, None, &Default::default()).unwrap_err();
    assert!(
        e.to_string().contains("imex-channel-0") && e.to_string().contains("ComputeDomains are on"),
        "{e}"
    );
    // A device config without a domain's: refused the same.
    let plain = config(r#"{"apiVersion":"graft.dev/v1alpha1","kind":"DeviceConfig"}"#);
    assert!(s.plan(&ch, Some(&plain), &Default::default()).is_err());
}

#[test]
fn time_slicing_is_planned_applied_and_undone_for_full_gpus_only() {
    let k = FakeKernel::start(false);
    let dev = tempfile::tempdir().unwrap();
    let smi = Recorded::default();
    let s = setup(&k, dev.path(), smi.clone());
    let long = config(
        r#"{"apiVersion":"graft.dev/v1alpha1","kind":"DeviceConfig",
            "sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}}"#,
    );
    let plan = s
        .plan(&device("gpu-2", "gpu"), Some(&long), &Default::default())
        .unwrap()
        .unwrap();
    assert_eq!(
        plan,
        NvidiaWork::TimeSlice {
            pci_bus_id: BDF.into(),
            interval: 3
        }
        .record()
        .unwrap()
    );
    assert_eq!(s.apply(&plan).unwrap(), None);
    s.undo(&plan).unwrap();
    assert_eq!(
        *smi.0.lock().unwrap(),
        vec![
            format!("-i {BDF} -c DEFAULT"),
            format!("compute-policy -i {BDF} --set-timeslice 3"),
            format!("compute-policy -i {BDF} --set-timeslice 0"),
        ]
    );
    let err = s
        .plan(
            &device("gpu-4-mig-1-0", "mig"),
            Some(&long),
            &Default::default(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("not MIG devices"), "{err}");
    let err = s
        .plan(&device("vfio-x", "vfio"), Some(&long), &Default::default())
        .unwrap_err();
    assert!(err.to_string().contains("VFIO"), "{err}");
    assert_eq!(
        s.plan(&device("gpu-2", "gpu"), None, &Default::default())
            .unwrap(),
        None
    );
    assert_eq!(
        s.plan(&device("fuse", "fuse"), Some(&long), &Default::default())
            .unwrap(),
        None
    );
}

#[test]
fn a_time_shared_device_needs_no_setup_and_takes_no_time_slice() {
    let k = FakeKernel::start(false);
    let dev = tempfile::tempdir().unwrap();
    let smi = Recorded::default();
    let s = setup(&k, dev.path(), smi.clone());
    let long = config(
        r#"{"apiVersion":"graft.dev/v1alpha1","kind":"DeviceConfig",
            "sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}}"#,
    );
    for (name, kind) in [("gpu-2", "gpu"), ("gpu-4-mig-1-0", "mig")] {
        let mut d = device(name, kind);
        d.attributes.insert(
            graft_api::attributes::SHARING.into(),
            Attribute::String(graft_api::sharing::TIME_SLICING.into()),
        );
        assert_eq!(s.plan(&d, None, &Default::default()).unwrap(), None);
        let err = s.plan(&d, Some(&long), &Default::default()).unwrap_err();
        assert!(
            err.to_string().contains("time-sliced among claims"),
            "{err}"
        );
    }
    assert!(smi.0.lock().unwrap().is_empty());
}

#[test]
fn an_mps_share_of_a_mig_device_names_its_parent_and_instances() {
    use graft_api::attributes::{CI_ID, GI_ID, PARENT_MINOR, SHARING, UUID};
    let k = FakeKernel::start(false);
    let dev = tempfile::tempdir().unwrap();
    let s = setup(&k, dev.path(), Recorded::default());
    let mut d = device("gpu-5-mig-13-0", "mig");
    for (name, value) in [
        (SHARING, Attribute::String(graft_api::sharing::MPS.into())),
        (UUID, Attribute::String("MIG-0d2b0004".into())),
        (PARENT_MINOR, Attribute::Int(5)),
        (GI_ID, Attribute::Int(13)),
        (CI_ID, Attribute::Int(0)),
    ] {
        d.attributes.insert(name.into(), value);
    }
    let alloc = Allocated {
        share_id: Some("s1".into()),
        consumed: [(COMPUTE.to_string(), "50".to_string())].into(),
        ..Default::default()
    };
    let plan = s.plan(&d, None, &alloc).unwrap().unwrap();
    assert_eq!(
        NvidiaWork::read(&plan).unwrap(),
        NvidiaWork::Mps {
            gpu_uuid: "MIG-0d2b0004".into(),
            minor: 5,
            mig: Some(crate::mps::MigIds { gi: 13, ci: 0 }),
            share: "s1".into(),
            compute: 50,
            memory_mib: None,
            namespace: String::new(),
            claim_uid: String::new(),
        }
    );
    // A claim's time-slice config on it is refused, as on any MIG device.
    let long = config(
        r#"{"apiVersion":"graft.dev/v1alpha1","kind":"DeviceConfig",
            "sharing":{"strategy":"TimeSlicing","timeSlicing":{"interval":"Long"}}}"#,
    );
    assert!(s.plan(&d, Some(&long), &alloc).is_err());
}
