//! The core driven directly: no API server, no async runtime. A fake device setup stands in
//! for the kernel (it remembers what is applied across "restarts", as the node would), a
//! crash hook stops an operation at a chosen point, and a restart is a new [`Core`] over
//! the same state directory.

mod concurrency;
mod crashes;
mod domains;
mod family_words;
mod groups;
mod old_checkpoints;
mod operations;
mod power_loss;
mod record_schemas;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use graft_record::{ContainerEdits, DeviceNode};

use graft_driver::claims::input::{ClaimError, ClaimInput, Outcome};
use graft_driver::claims::seams::{CrashHook, CrashPoint, Crashed, NotReady, NriGate};
use graft_driver::claims::setup_port::{DeviceSetup, PciUse, Setup, SetupError};
use graft_driver::claims::{Core, CoreError, PreparedDevice};
use graft_driver::discovery::nvidia::opaque::NvidiaOpaque;
use graft_driver::discovery::nvidia::setup::{answers, NvidiaWork, VfioPeer};
use graft_driver::discovery::nvidia::setup_error::NvidiaSetupError;
use graft_driver::mapping::{ContainerUse, PodUse};
use graft_driver::model::{Allocated, ClaimId};
use graft_driver::model::{Attribute, Device, Kind};
use graft_driver::opaque::DeviceConfig;

const NODE: &str = "node-a";
const BOOT: &str = "boot-1";

/// graft-nri is there, or not.
struct Gate(Result<(), String>);

impl NriGate for Gate {
    fn ready(&self) -> Result<(), NotReady> {
        self.0.clone().map_err(NotReady::Status)
    }
}

/// Stops the first operation that reaches `point`, once.
struct CrashAt(Mutex<Option<CrashPoint>>);

impl CrashHook for CrashAt {
    fn at(&self, point: CrashPoint) -> Result<(), Crashed> {
        let mut armed = self.0.lock().unwrap();
        if *armed == Some(point) {
            *armed = None;
            return Err(Crashed(point));
        }
        Ok(())
    }
}

/// What the fake kernel has been asked to do.
#[derive(Debug, Default)]
struct Kernel {
    /// PCI functions whose setup is in force.
    applied: BTreeSet<String>,
    applies: usize,
    /// Setups running now, by PCI function, and the most ever running at once.
    running: BTreeMap<String, usize>,
    most_on_one_device: usize,
    most_at_once: usize,
    /// Setups that wait until released.
    held: BTreeSet<String>,
    /// Setups that fail.
    failing: BTreeSet<String>,
    /// Setups that panic.
    panicking: BTreeSet<String>,
}

/// VFIO for devices of kind `Vfio`, time-slicing for GPUs whose claim asks to share them;
/// every setup is a PCI function in [`Kernel::applied`].
#[derive(Default)]
struct FakeSetup {
    kernel: Mutex<Kernel>,
    changed: Condvar,
}

impl FakeSetup {
    fn kernel(&self) -> std::sync::MutexGuard<'_, Kernel> {
        self.kernel.lock().unwrap()
    }

    fn hold(&self, pci: &str) {
        self.kernel().held.insert(pci.into());
    }

    fn release(&self, pci: &str) {
        self.kernel().held.remove(pci);
        self.changed.notify_all();
    }

    /// Waits until a setup of `pci` is running.
    fn wait_running(&self, pci: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut k = self.kernel();
        while !k.running.contains_key(pci) {
            assert!(Instant::now() < deadline, "setup of {pci} never started");
            k = self
                .changed
                .wait_timeout(k, Duration::from_millis(50))
                .unwrap()
                .0;
        }
    }
}

impl DeviceSetup for FakeSetup {
    fn plan(
        &self,
        device: &Device,
        config: Option<&DeviceConfig>,
        _: &Allocated,
    ) -> Result<Option<Setup>, SetupError> {
        let Some(pci) = device.string_attribute("pciBusID").map(str::to_string) else {
            return Ok(None);
        };
        let sharing = config
            .and_then(|c| c.family.part::<NvidiaOpaque>())
            .and_then(|n| n.sharing.as_ref());
        let work = match (device.kind, sharing) {
            // Its IOMMU group peers, as the test inventory lists them.
            (Kind::Passthrough, _) => Some(NvidiaWork::Vfio {
                pci_bus_id: pci,
                persistence: false,
                peers: device
                    .string_attribute("iommuGroupPeers")
                    .unwrap_or_default()
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(|p| VfioPeer {
                        pci_bus_id: p.into(),
                        driver: None,
                        persistence: false,
                    })
                    .collect(),
            }),
            (Kind::Whole, Some(s)) => Some(NvidiaWork::TimeSlice {
                pci_bus_id: pci,
                interval: s.interval().smi_value(),
            }),
            _ => None,
        };
        work.map(|w| w.record()).transpose()
    }

    fn apply(&self, setup: &Setup) -> Result<Option<ContainerEdits>, SetupError> {
        let pci = pci_of(setup);
        let mut k = self.kernel();
        if k.panicking.contains(&pci) {
            // Not while holding the fake kernel's lock: later calls still use it.
            drop(k);
            panic!("the fake setup of {pci} panics");
        }
        *k.running.entry(pci.clone()).or_default() += 1;
        k.most_on_one_device = k.most_on_one_device.max(k.running[&pci]);
        k.most_at_once = k.most_at_once.max(k.running.values().sum());
        self.changed.notify_all();
        while k.held.contains(&pci) {
            k = self.changed.wait(k).unwrap();
        }
        let n = k.running.get_mut(&pci).unwrap();
        *n -= 1;
        if *n == 0 {
            k.running.remove(&pci);
        }
        k.applies += 1;
        if k.failing.contains(&pci) {
            return Err(NvidiaSetupError::ForeignDriver {
                pci,
                driver: "refused".into(),
            }
            .into());
        }
        k.applied.insert(pci);
        Ok((setup.kind() == "vfio").then(|| ContainerEdits {
            device_nodes: vec![DeviceNode::char("/dev/vfio/7", 240, 7, 0o660)],
            ..Default::default()
        }))
    }

    fn undo(&self, setup: &Setup) -> Result<(), SetupError> {
        self.kernel().applied.remove(&pci_of(setup));
        Ok(())
    }

    fn pci(&self, setup: &Setup) -> Option<PciUse> {
        answers::pci(setup)
    }
}

/// The PCI function a setup of [`FakeSetup`]'s rebinds or reconfigures.
fn pci_of(setup: &Setup) -> String {
    NvidiaWork::read(setup)
        .ok()
        .and_then(|w| w.pci_bus_id().map(String::from))
        .unwrap_or_default()
}

fn char_device(name: &str, minor: i64) -> Device {
    Device {
        edits: ContainerEdits {
            device_nodes: vec![DeviceNode::char(format!("/dev/{name}"), 10, minor, 0o666)],
            ..Default::default()
        },
        ..Device::new(name, Kind::Char)
    }
}

fn pci_device(name: &str, kind: Kind, pci: &str) -> Device {
    let mut d = char_device(name, 0);
    d.kind = kind;
    d.attributes
        .insert("pciBusID".into(), Attribute::String(pci.into()));
    d
}

/// A GPU offered for passthrough with the other functions of its IOMMU group.
fn grouped(name: &str, pci: &str, peers: &str) -> Device {
    let mut d = pci_device(name, Kind::Passthrough, pci);
    d.attributes
        .insert("iommuGroupPeers".into(), Attribute::String(peers.into()));
    d
}

/// The node: two char devices, two GPUs offered for passthrough, and GPU 0 also offered
/// whole (same PCI function as vfio-0); GPUs 3 and 4 share an IOMMU group with 3's audio
/// function, and GPU 4 is offered whole too.
fn inventory() -> Vec<Device> {
    vec![
        char_device("fuse", 229),
        char_device("tun", 200),
        pci_device("vfio-0", Kind::Passthrough, "0000:01:00.0"),
        pci_device("vfio-1", Kind::Passthrough, "0000:02:00.0"),
        pci_device("gpu-0", Kind::Whole, "0000:01:00.0"),
        grouped("vfio-3", "0000:03:00.0", "0000:03:00.1,0000:04:00.0"),
        grouped("vfio-4", "0000:04:00.0", "0000:03:00.0,0000:03:00.1"),
        pci_device("gpu-4", Kind::Whole, "0000:04:00.0"),
    ]
}

/// A state directory and a fake kernel that outlive every [`Core`] made over them.
struct Node {
    dir: tempfile::TempDir,
    setup: Arc<FakeSetup>,
}

impl Node {
    fn new() -> Self {
        Node {
            dir: tempfile::tempdir().unwrap(),
            setup: Arc::new(FakeSetup::default()),
        }
    }

    /// A driver process: a new core, started up.
    fn start(&self) -> Core {
        self.start_with(None, BOOT)
    }

    /// A driver process that will stop at `crash`.
    fn start_with(&self, crash: Option<CrashPoint>, boot: &str) -> Core {
        let core = Core::new("graft.dev", NODE, self.dir.path().to_path_buf(), boot)
            .unwrap()
            .with_setup(Arc::clone(&self.setup) as Arc<dyn DeviceSetup>)
            .with_opaque(graft_driver::families::opaque())
            .with_gate(Box::new(Gate(Ok(()))))
            .with_crash_hook(Box::new(CrashAt(Mutex::new(crash))));
        core.set_inventory(&inventory());
        core.startup().unwrap();
        core
    }

    fn applied(&self) -> BTreeSet<String> {
        self.setup.kernel().applied.clone()
    }
}

fn id(uid: &str) -> ClaimId {
    ClaimId {
        namespace: "ns".into(),
        uid: uid.into(),
        name: format!("claim-{uid}"),
    }
}

/// Claim `uid` allocated `devices` (request `r`), reserved for pod `pod-<uid>` whose
/// container `main` uses all of it.
fn claim(uid: &str, devices: &[&str]) -> ClaimInput {
    ClaimInput {
        id: id(uid),
        results: devices
            .iter()
            .map(|d| Allocated {
                request: "r".into(),
                pool: NODE.into(),
                device: d.to_string(),
                share_id: None,
                admin_access: false,
                consumed: Default::default(),
            })
            .collect(),
        configs: Vec::new(),
        pods: vec![pod(&format!("pod-{uid}"))],
        pod_errors: Vec::new(),
    }
}

/// Claim `uid` for a share of gpu-0, time-sliced.
fn shared(uid: &str) -> ClaimInput {
    let mut c = claim(uid, &["gpu-0"]);
    c.results[0].share_id = Some(format!("share-{uid}"));
    c.configs = vec![serde_json::from_value(serde_json::json!({
        "source": "FromClaim",
        "opaque": {"driver": "graft.dev", "parameters": {
            "apiVersion": "graft.dev/v1alpha1", "kind": "DeviceConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicing": {"interval": "Long"}}
        }}
    }))
    .unwrap()];
    c
}

fn pod(uid: &str) -> PodUse {
    PodUse {
        uid: uid.into(),
        namespace: "ns".into(),
        name: uid.into(),
        containers: vec![ContainerUse {
            name: "main".into(),
            requests: vec![None],
        }],
    }
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

type Prepared = BTreeMap<String, Outcome<Vec<PreparedDevice>>>;

fn prepare(core: &Core, claims: Vec<ClaimInput>) -> Prepared {
    core.prepare(claims, soon()).unwrap()
}

/// The devices of a claim that prepared, or its error.
fn devices_of(out: &Prepared, uid: &str) -> Result<Vec<String>, String> {
    match &out[uid] {
        Ok(devs) => Ok(devs.iter().map(|d| d.device.clone()).collect()),
        Err(e) => Err(e.to_string()),
    }
}

fn unprepare(core: &Core, uids: &[&str]) -> BTreeMap<String, Outcome<()>> {
    let ids: Vec<ClaimId> = uids.iter().map(|u| id(u)).collect();
    core.unprepare(&ids, soon()).unwrap()
}

fn is_crash(e: CoreError, point: CrashPoint) -> bool {
    matches!(e, CoreError::Crashed(Crashed(p)) if p == point)
}

fn claim_error<T: std::fmt::Debug>(o: &Outcome<T>) -> &ClaimError {
    o.as_ref().expect_err("the claim failed")
}
