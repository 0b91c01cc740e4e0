//! NodePrepareResources and NodeUnprepareResources latency of a dynamic MIG claim (the GPU
//! and compute instance created through NVML at prepare, destroyed at unprepare) against a
//! static MIG claim (the instance exists; only the checkpoint and record are written), on
//! the fake libnvidia-ml (H100 80GB rules, state in a file as the fake keeps it). The core
//! is driven as the DRA service drives it, over a state directory on disk (every checkpoint
//! and record write fsynced). The two alternate claim by claim so that the machine's noise
//! falls on both; the ratio is the figure to read. The fake's NVML calls cost far less than
//! a real GPU's (NVIDIA documents instance creation in the order of a second on real
//! hardware): this measures graft's own part.
//!
//! Run: `cargo bench -p graft-integration --bench dynamic_mig`

use std::sync::Arc;
use std::time::{Duration, Instant};

use graft_driver::claims::input::ClaimInput;
use graft_driver::claims::seams::NriGate;
use graft_driver::claims::setup_port::SetupError;
use graft_driver::claims::Core;
use graft_driver::discovery::nvidia::devices::MigLedger;
use graft_driver::discovery::nvidia::setup::MigManager;
use graft_driver::discovery::nvidia::setup::Vfio;
use graft_driver::discovery::nvidia::setup::{NvidiaSetup, Smi};
use graft_driver::discovery::nvidia::NvidiaDiscovery;
use graft_driver::discovery::Discovery;
use graft_driver::mapping::{ContainerUse, PodUse};
use graft_driver::model::{Allocated, ClaimId};
use graft_integration::fake_gpu::FakeNode;
use graft_record::policy::{nvidia_mount_roots, DEFAULT_HOOK_PATH};
use graft_record::InjectionPolicy;

const ROUNDS: usize = 50;
const NODE: &str = "bench-node";
const STATIC: &str = "gpu-5-mig-1-0";
const DYNAMIC: &str = "gpu-7-mig-3g-40gb-4";

struct Ready;
impl NriGate for Ready {
    fn ready(&self) -> Result<(), graft_driver::claims::seams::NotReady> {
        Ok(())
    }
}

struct NoSmi;
impl Smi for NoSmi {
    fn run(&self, _: &[String]) -> Result<(), SetupError> {
        Ok(())
    }
}

fn claim(uid: &str, device: &str) -> ClaimInput {
    ClaimInput {
        id: id(uid),
        results: vec![Allocated {
            request: "mig".into(),
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

fn id(uid: &str) -> ClaimId {
    ClaimId {
        namespace: "bench".into(),
        uid: uid.into(),
        name: uid.into(),
    }
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[(((v.len() - 1) as f64) * p).round() as usize]
}

fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let node = FakeNode::create(&dir.path().join("node"))?;
    let mig_state = dir.path().join("mig-state");
    node.configure_mig(&format!("mig 5 on\nstate {}\n", mig_state.display()))?;
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state)?;
    let config = node.nvidia_config(&state.join("nvidia/params"), "5", 0)?;
    let ledger = MigLedger::default();
    let discovery = NvidiaDiscovery::new(config)?.with_ledger(ledger.clone());
    let devices = discovery.discover()?;
    let setup = NvidiaSetup {
        vfio: Vfio {
            sys: node.sys.clone(),
            proc: node.proc.clone(),
            timeout: Duration::ZERO,
        },
        dev_root: node.dev.clone(),
        smi: Box::new(NoSmi),
        persistence: Box::new(graft_driver::discovery::nvidia::setup::Untouched),
        rescan: Box::new(|| {}),
        mps: None,
        domains: Default::default(),
        mig: Some(MigManager::new(
            discovery.nvml_path()?,
            node.proc.clone(),
            ledger,
        )),
    };
    let policy = InjectionPolicy::for_node(
        &state,
        DEFAULT_HOOK_PATH,
        &nvidia_mount_roots(&node.host),
        &[],
    )?
    .with_ldconfig("/sbin/ldconfig")?;
    let core = Core::new("graft.dev", NODE, state.clone(), "bench-boot")?
        .with_policy(policy)
        .with_setup(Arc::new(setup))
        .with_opaque(graft_driver::families::opaque())
        .with_gate(Box::new(Ready));
    core.set_inventory(&devices);
    core.startup()?;

    let mut lat: [[Vec<f64>; 2]; 2] = Default::default();
    for round in 0..=ROUNDS {
        for (k, device) in [STATIC, DYNAMIC].into_iter().enumerate() {
            let uid = format!("{k}-{round}");
            let t = Instant::now();
            let out = core.prepare(vec![claim(&uid, device)], far())?;
            let p = ms(t);
            if let Some(Err(e)) = out.get(&uid) {
                anyhow::bail!("prepare {device}: {e}");
            }
            let t = Instant::now();
            let out = core.unprepare(&[id(&uid)], far())?;
            let u = ms(t);
            if let Some(Err(e)) = out.get(&uid) {
                anyhow::bail!("unprepare {device}: {e}");
            }
            // Round 0 warms NVML's load and the page cache.
            if round > 0 {
                lat[k][0].push(p);
                lat[k][1].push(u);
            }
        }
    }
    let left = FakeNode::mig_instances(&mig_state)?
        .into_iter()
        .filter(|i| i.gpu == 5)
        .count();
    anyhow::ensure!(left == 0, "{left} instances left on GPU 5");

    println!("{ROUNDS} claims each, alternating, one at a time (ms):\n");
    println!("| claim | prepare p50 | prepare p99 | unprepare p50 | unprepare p99 |");
    println!("|---|---|---|---|---|");
    let mut p50 = [[0.0; 2]; 2];
    for (k, name) in [
        "static MIG (instance exists)",
        "dynamic MIG (instance made)",
    ]
    .into_iter()
    .enumerate()
    {
        for op in 0..2 {
            p50[k][op] = pct(&mut lat[k][op], 0.5);
        }
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.2} |",
            p50[k][0],
            pct(&mut lat[k][0], 0.99),
            p50[k][1],
            pct(&mut lat[k][1], 0.99)
        );
    }
    println!(
        "\ndynamic / static, p50: prepare {:.2}x, unprepare {:.2}x",
        p50[1][0] / p50[0][0],
        p50[1][1] / p50[0][1]
    );
    Ok(())
}
