//! What the per-pod GPU usage metrics cost graft-driver each round (docs/benchmarks.md):
//! one round of the nvidia family's reads (`usage::measure`) on the fake 8-GPU node, side by
//! side with the floor, the same NVML calls made bare (utilisation, memory and power of each
//! whole GPU, memory of each MIG device, MPS clients of each MPS GPU); and the core's
//! attribution of a round to 64 claims. Three runs of interleaved rounds; the ratio is
//! graft's over the floor, mean and half range across runs.
//!
//! `cargo bench -p graft-integration --bench gpu_usage`

use std::time::{Duration, Instant};

use graft_driver::discovery::nvidia::devices::Identity;
use graft_driver::discovery::nvidia::{nvml, usage, NvidiaDiscovery};
use graft_driver::discovery::Discovery;
use graft_driver::metrics::usage::attribute;
use graft_driver::model::Kind;
use graft_integration::fake_gpu::FakeNode;
use graft_record::{ClaimRecord, ClaimRef, ContainerRecord, DeviceRecord, PodRecord};

const RUNS: usize = 3;
const ROUNDS: usize = 200;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let node = FakeNode::create(&dir.path().join("node"))?;
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state)?;
    let mut config = node.nvidia_config(&state.join("nvidia/params"), "none", 0)?;
    config.mps = graft_driver::discovery::nvidia::nvml::GpuSelection::parse("4")
        .map_err(anyhow::Error::msg)?;
    let discovery = NvidiaDiscovery::new(config)?;
    let devices = discovery.discover()?;
    std::fs::write(
        node.mig_config_file().with_file_name("fake-nvml-usage"),
        "gpu 0 util 87 memory 2048 power 250000\nmig 7 13 memory 1024\nmps 4 4242 512\nmps 4 4343 256\n",
    )?;
    let nvml = nvml::open(&discovery.nvml_path()?)?;

    let bare = || {
        for d in &devices {
            let id = Identity::of(d);
            let Some(uuid) = id.uuid.as_deref() else {
                continue;
            };
            let Ok(dev) = nvml.device_by_uuid(uuid) else {
                continue;
            };
            match d.kind {
                Kind::Whole if id.mps => {
                    let _ = dev.mps_running_compute_processes();
                }
                Kind::Whole => {
                    let _ = dev.utilization_rates();
                    let _ = dev.memory_info();
                    let _ = dev.power_usage();
                }
                Kind::Partition => {
                    let _ = dev.memory_info();
                }
                _ => {}
            }
        }
    };
    let mut ratios = Vec::new();
    let mut ours_all = Vec::new();
    let mut floor_all = Vec::new();
    for _ in 0..RUNS {
        let (mut ours, mut floor) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let t = Instant::now();
            bare();
            floor.push(t.elapsed());
            let t = Instant::now();
            std::hint::black_box(usage::measure(&nvml, &devices, &node.proc));
            ours.push(t.elapsed());
        }
        let (o, f) = (median(ours.clone()), median(floor.clone()));
        ratios.push(o.as_secs_f64() / f.as_secs_f64());
        ours_all.extend(ours);
        floor_all.extend(floor);
    }
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    let half = (ratios.iter().cloned().fold(f64::MIN, f64::max)
        - ratios.iter().cloned().fold(f64::MAX, f64::min))
        / 2.0;
    let report = usage::measure(&nvml, &devices, &node.proc);
    println!(
        "| a usage round, {} devices ({} measured) | {:?} | {:?} (the NVML calls bare) | {mean:.3} ± {half:.3} |",
        devices.len(),
        report.devices.len(),
        median(ours_all),
        median(floor_all),
    );

    // The core's attribution: 64 claims, each a device for one pod of two containers.
    let mut big = report.clone();
    let template = big.devices[0].clone();
    big.devices = (0..64)
        .map(|i| {
            let mut d = template.clone();
            d.device = format!("gpu-{i}");
            d
        })
        .collect();
    let records: Vec<ClaimRecord> = (0..64)
        .map(|i| ClaimRecord {
            version: 2,
            claim: ClaimRef {
                uid: format!("uid-{i}"),
                namespace: "ns".into(),
                name: format!("claim-{i}"),
            },
            devices: vec![DeviceRecord {
                name: format!("gpu-{i}"),
                pool: "node".into(),
                requests: vec!["gpu".into()],
                edits: Default::default(),
            }],
            env: Vec::new(),
            pods: vec![PodRecord {
                uid: format!("pod-{i}"),
                namespace: "ns".into(),
                name: format!("pod-{i}"),
                containers: ["main", "side"]
                    .iter()
                    .map(|c| ContainerRecord {
                        name: c.to_string(),
                        devices: vec![format!("gpu-{i}")],
                    })
                    .collect(),
            }],
        })
        .collect();
    let mut times = Vec::new();
    for _ in 0..RUNS * ROUNDS {
        let t = Instant::now();
        let out = attribute(&big, &records, |_| None);
        times.push(t.elapsed());
        assert_eq!(out.len(), 128);
    }
    println!(
        "| attributing a round to 64 claims (128 containers) | {:?} | | |",
        median(times)
    );
    println!("({RUNS} runs of {ROUNDS} interleaved rounds; medians)");
    Ok(())
}
