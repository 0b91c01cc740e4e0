//! Dynamic MIG in graft-driver against the fake libnvidia-ml's MIG rules (H100 80GB):
//! which placements a partitioned GPU offers, how prepare's setup makes, adopts and
//! destroys an instance, and how an instance graft did not make is left alone (its
//! placements not offered, a create that would collide refused with a clear error).

use std::collections::BTreeSet;
use std::path::Path;

use graft_driver::claims::setup_port::DeviceSetup;
use graft_driver::discovery::nvidia::devices::MigLedger;
use graft_driver::discovery::nvidia::nvml::GpuSelection;
use graft_driver::discovery::nvidia::setup::MigManager;
use graft_driver::discovery::nvidia::setup::NvidiaSetup;
use graft_driver::discovery::nvidia::setup::NvidiaWork;
use graft_driver::discovery::nvidia::NvidiaDiscovery;
use graft_driver::discovery::Discovery;
use graft_driver::model::Device;
use graft_integration::fake_gpu::{FakeNode, MigInstance};

use crate::common;

/// The fake library's MIG configuration is per node directory, but NVML handles are
/// process-wide: one test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Node {
    _dir: tempfile::TempDir,
    node: FakeNode,
    state: std::path::PathBuf,
}

/// A fake node whose GPU 5 (minor 7) has MIG on and no instances; 6 and 7 keep the
/// operator's instances.
fn node() -> Node {
    let dir = tempfile::tempdir().unwrap();
    let node = FakeNode::create(dir.path()).unwrap();
    let state = dir.path().join("mig-state");
    node.configure_mig(&format!("mig 5 on\nstate {}\n", state.display()))
        .unwrap();
    Node {
        _dir: dir,
        node,
        state,
    }
}

fn discovery(n: &Node, gpus: &str, ledger: &MigLedger) -> NvidiaDiscovery {
    let mut d = common::discovery_config(&n.node, common::as_host_root(&n.node), 0, "/bin/true");
    d.dynamic_mig = GpuSelection::parse(gpus).unwrap();
    NvidiaDiscovery::new(d).unwrap().with_ledger(ledger.clone())
}

fn setup(n: &Node, d: &NvidiaDiscovery, ledger: &MigLedger) -> NvidiaSetup {
    common::nvidia_setup(
        &n.node,
        Some(MigManager::new(
            d.nvml_path().unwrap(),
            n.node.proc.clone(),
            ledger.clone(),
        )),
        None,
    )
}

fn names(devices: &[Device], prefix: &str) -> BTreeSet<String> {
    devices
        .iter()
        .filter(|d| d.name.starts_with(prefix))
        .map(|d| d.name.clone())
        .collect()
}

fn instances(state: &Path, gpu: usize) -> Vec<(u32, u32)> {
    let mut v: Vec<(u32, u32)> = FakeNode::mig_instances(state)
        .unwrap()
        .into_iter()
        .filter(|i: &MigInstance| i.gpu == gpu)
        .map(|i| (i.profile, i.start))
        .collect();
    v.sort();
    v
}

#[test]
fn a_partitioned_gpu_offers_every_placement_and_prepare_makes_the_instance() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let n = node();
    let ledger = MigLedger::default();
    let d = discovery(&n, "5,6", &ledger);
    let devices = d.discover().unwrap();
    let gpu7 = names(&devices, "gpu-7");
    // The whole GPU and 25 placements: 1g.10gb x7, 1g.10gb+me x7, 1g.20gb x4, 2g.20gb x3,
    // 3g.40gb x2, 4g.40gb, 7g.80gb.
    assert_eq!(gpu7.len(), 26, "{gpu7:?}");
    // Placements in the order that keeps room for big instances (docs/placement.md): the
    // scheduler takes the first that fits.
    let order: Vec<&str> = devices
        .iter()
        .map(|d| d.name.as_str())
        .filter(|n| n.starts_with("gpu-7-mig-1g-10gb-") && !n.contains("-me-"))
        .collect();
    assert_eq!(
        order,
        (0..7)
            .rev()
            .map(|s| format!("gpu-7-mig-1g-10gb-{s}"))
            .collect::<Vec<_>>()
    );
    for want in [
        "gpu-7",
        "gpu-7-mig-3g-40gb-4",
        "gpu-7-mig-1g-10gb-me-6",
        "gpu-7-mig-7g-80gb-0",
    ] {
        assert!(gpu7.contains(want), "{want} missing: {gpu7:?}");
    }
    // GPU 6 (minor 4) is listed too, but its operator filled it with two 3g.40gb: nothing
    // of it is offered, and its instances are not touched.
    assert!(
        names(&devices, "gpu-4").is_empty(),
        "{:?}",
        names(&devices, "gpu-4")
    );
    // GPU 7 (minor 5) is not listed: its operator's MIG devices as before.
    assert!(
        names(&devices, "gpu-5-mig-1-0").len() == 1,
        "{:?}",
        names(&devices, "gpu-")
    );

    let s = setup(&n, &d, &ledger);
    let by = |name: &str| devices.iter().find(|x| x.name == name).unwrap().clone();
    let three = s
        .plan(&by("gpu-7-mig-3g-40gb-4"), None, &Default::default())
        .unwrap()
        .unwrap();
    assert!(
        matches!(
            NvidiaWork::read(&three).unwrap(),
            NvidiaWork::Mig {
                profile: 2,
                start: 4,
                size: 4,
                slices: 3,
                ..
            }
        ),
        "{three:?}"
    );
    let edits = s.apply(&three).unwrap().unwrap();
    assert_eq!(instances(&n.state, 5), [(2, 4)]);
    let caps: Vec<&str> = edits.device_nodes.iter().map(|x| x.path.as_str()).collect();
    assert_eq!(caps.len(), 2, "{caps:?}");
    assert!(
        caps.iter()
            .all(|p| p.starts_with("/dev/nvidia-caps/nvidia-cap")),
        "{caps:?}"
    );
    // A retry (or a restart that finds it) adopts the instance: same nodes, no second one.
    assert_eq!(s.apply(&three).unwrap().unwrap(), edits);
    assert_eq!(instances(&n.state, 5), [(2, 4)]);

    // Graft's own instance leaves every placement offered (the scheduler's counters keep
    // them apart); one it does not know of takes its placements away.
    let again = names(&discovery(&n, "5", &ledger).discover().unwrap(), "gpu-7");
    assert_eq!(again.len(), 26);
    let strange = names(
        &discovery(&n, "5", &MigLedger::default())
            .discover()
            .unwrap(),
        "gpu-7",
    );
    assert!(
        !strange.contains("gpu-7-mig-3g-40gb-4") && !strange.contains("gpu-7"),
        "{strange:?}"
    );
    assert!(strange.contains("gpu-7-mig-4g-40gb-0"), "{strange:?}");

    // 7g.80gb collides with the 3g: refused by NVML, said clearly, nothing half made.
    let seven = s
        .plan(&by("gpu-7-mig-7g-80gb-0"), None, &Default::default())
        .unwrap()
        .unwrap();
    let err = s.apply(&seven).unwrap_err().to_string();
    assert!(err.contains("insufficient resources"), "{err}");
    assert_eq!(instances(&n.state, 5), [(2, 4)]);

    // Unprepare destroys it; twice is fine.
    s.undo(&three).unwrap();
    s.undo(&three).unwrap();
    assert!(instances(&n.state, 5).is_empty());
    // The operator's instances on GPU 6 are untouched throughout.
    assert_eq!(instances(&n.state, 6), [(2, 0), (2, 4)]);
    let four = s
        .plan(&by("gpu-7-mig-4g-40gb-0"), None, &Default::default())
        .unwrap()
        .unwrap();
    s.apply(&four).unwrap();
    assert_eq!(instances(&n.state, 5), [(3, 0)]);
    s.undo(&four).unwrap();
}
