//! NodePrepareResources latency of fast claims (a char device each) while another claim's
//! device setup is slow (a GPU waiting to be freed for passthrough), against the same calls
//! with nothing slow running, and against the same calls made one at a time, as a driver
//! that holds one lock through setups would make them. The three run interleaved, round by
//! round, so that the machine's noise falls on all of them; the ratios are the figures to
//! read. The core is driven as the DRA service drives it (one blocking thread per kubelet
//! call, one claim per call), over a state directory on disk, so every checkpoint and
//! record write is fsynced.
//!
//! Run: `cargo bench -p graft-driver --bench prepare_concurrency`

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use graft_driver::claims::input::ClaimInput;
use graft_driver::claims::seams::NriGate;
use graft_driver::claims::setup_port::{DeviceSetup, PciUse, Setup, SetupError};
use graft_driver::claims::Core;
use graft_driver::discovery::nvidia::setup::{answers, NvidiaWork};
use graft_driver::mapping::{ContainerUse, PodUse};
use graft_driver::model::{Allocated, ClaimId};
use graft_driver::model::{Attribute, Device, Kind};
use graft_driver::opaque::DeviceConfig;
use graft_record::{ContainerEdits, DeviceNode};

const FAST: usize = 100;
const ROUNDS: usize = 5;
const SLOW: Duration = Duration::from_secs(2);
const NODE: &str = "bench-node";

struct Ready;

impl NriGate for Ready {
    fn ready(&self) -> Result<(), graft_driver::claims::seams::NotReady> {
        Ok(())
    }
}

/// VFIO setup that takes `SLOW`, as a rebind waiting for a GPU's last user does.
struct SlowVfio;

impl DeviceSetup for SlowVfio {
    fn plan(
        &self,
        d: &Device,
        _: Option<&DeviceConfig>,
        _: &Allocated,
    ) -> Result<Option<Setup>, SetupError> {
        let work = (d.kind == Kind::Passthrough).then(|| NvidiaWork::vfio("0000:01:00.0"));
        work.map(|w| w.record()).transpose()
    }
    fn apply(&self, _: &Setup) -> Result<Option<ContainerEdits>, SetupError> {
        std::thread::sleep(SLOW);
        Ok(None)
    }
    fn undo(&self, _: &Setup) -> Result<(), SetupError> {
        Ok(())
    }
    fn pci(&self, setup: &Setup) -> Option<PciUse> {
        answers::pci(setup)
    }
}

fn device(name: &str, kind: Kind, minor: i64) -> Device {
    let mut attributes = BTreeMap::new();
    if kind == Kind::Passthrough {
        attributes.insert("pciBusID".into(), Attribute::String("0000:01:00.0".into()));
    }
    Device {
        attributes,
        edits: ContainerEdits {
            device_nodes: vec![DeviceNode::char(format!("/dev/{name}"), 240, minor, 0o666)],
            ..Default::default()
        },
        ..Device::new(name, kind)
    }
}

fn claim(uid: &str, device: &str) -> ClaimInput {
    ClaimInput {
        id: ClaimId {
            namespace: "bench".into(),
            uid: uid.into(),
            name: uid.into(),
        },
        results: vec![Allocated {
            request: "d".into(),
            pool: NODE.into(),
            device: device.into(),
            share_id: None,
            admin_access: false,
            consumed: Default::default(),
        }],
        configs: Vec::new(),
        pods: vec![PodUse {
            uid: format!("pod-{uid}"),
            namespace: "bench".into(),
            name: format!("pod-{uid}"),
            containers: vec![ContainerUse {
                name: "c".into(),
                requests: vec![None],
            }],
        }],
        pod_errors: Vec::new(),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Nothing slow runs.
    Alone,
    /// A slow setup runs on another device the whole time.
    BesideSlow,
    /// Beside the slow setup, every call waits for the one before (one lock for all).
    OneAtATime,
}

/// One round: `FAST` concurrent calls; their latencies in ms.
fn round(core: &Arc<Core>, mode: Mode, round: usize) -> Vec<f64> {
    let serial = Arc::new(Mutex::new(()));
    let far = || Instant::now() + Duration::from_secs(60);
    let slow_uid = format!("slow-{round}");
    let slow = (mode != Mode::Alone).then(|| {
        let core = Arc::clone(core);
        let serial = Arc::clone(&serial);
        let uid = slow_uid.clone();
        let t = std::thread::spawn(move || {
            let _one = (mode == Mode::OneAtATime).then(|| serial.lock());
            core.prepare(vec![claim(&uid, "vfio-0")], far())
        });
        // Under way before the fast ones come.
        std::thread::sleep(Duration::from_millis(100));
        t
    });
    let fast: Vec<_> = (0..FAST)
        .map(|i| {
            let core = Arc::clone(core);
            let serial = Arc::clone(&serial);
            std::thread::spawn(move || {
                let t = Instant::now();
                let _one = (mode == Mode::OneAtATime).then(|| serial.lock());
                let out = core
                    .prepare(
                        vec![claim(&format!("fast-{i}"), &format!("fast-{i}"))],
                        far(),
                    )
                    .expect("prepare");
                assert!(out.values().all(|o| o.is_ok()), "{out:?}");
                t.elapsed().as_secs_f64() * 1e3
            })
        })
        .collect();
    let lat: Vec<f64> = fast
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect();
    let mut ids: Vec<ClaimId> = (0..FAST)
        .map(|i| ClaimId {
            namespace: "bench".into(),
            uid: format!("fast-{i}"),
            name: format!("fast-{i}"),
        })
        .collect();
    if let Some(t) = slow {
        let out = t.join().expect("thread").expect("slow prepare");
        assert!(out.values().all(|o| o.is_ok()));
        ids.push(ClaimId {
            namespace: "bench".into(),
            uid: slow_uid.clone(),
            name: slow_uid,
        });
    }
    core.unprepare(&ids, far()).expect("unprepare");
    lat
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[(((v.len() - 1) as f64) * p).round() as usize]
}

fn main() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("state dir");
    let core = Core::new("graft.dev", NODE, dir.path().to_path_buf(), "bench-boot")
        .expect("core")
        .with_setup(Arc::new(SlowVfio))
        .with_opaque(graft_driver::families::opaque())
        .with_gate(Box::new(Ready));
    let mut inv: Vec<Device> = (0..FAST)
        .map(|i| device(&format!("fast-{i}"), Kind::Char, i as i64))
        .collect();
    inv.push(device("vfio-0", Kind::Passthrough, 999));
    core.set_inventory(&inv);
    core.startup().expect("startup");
    let core = Arc::new(core);

    let modes = [
        (Mode::Alone, "nothing slow running"),
        (Mode::BesideSlow, "a 2 s setup running on another device"),
        (
            Mode::OneAtATime,
            "the same, calls one at a time (one lock through setups)",
        ),
    ];
    let mut lat: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    round(&core, Mode::Alone, 0); // warm-up
    for r in 1..=ROUNDS {
        for (i, (m, _)) in modes.iter().enumerate() {
            lat[i].extend(round(&core, *m, r));
        }
    }
    println!("{FAST} concurrent one-claim prepares, {ROUNDS} rounds, state on disk (fsync):\n");
    println!("| fast claims with | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|");
    let mut p99 = Vec::new();
    for ((_, what), l) in modes.iter().zip(lat.iter_mut()) {
        let (p50, p, max) = (pct(l, 0.5), pct(l, 0.99), pct(l, 1.0));
        p99.push(p);
        println!("| {what} | {p50:.1} | {p:.1} | {max:.1} |");
    }
    println!(
        "\np99 ratio beside a slow setup / alone: {:.2}; one at a time / alone: {:.1}",
        p99[1] / p99[0],
        p99[2] / p99[0]
    );
}
