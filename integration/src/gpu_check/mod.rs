//! The GPU check (`graft-gpu-check`, run by integration/gpu/check.sh on a node with an
//! NVIDIA GPU, and by integration/tests/suite/gpu_check.rs on the fake node): graft-driver's
//! discovery on the node, then the testbed's containerd 2.2 with graft-nri, a record
//! giving the first GPU to container `gpu` of a pod whose container `sibling` gets
//! nothing, what each container sees (nvidia-smi, a CUDA probe, /dev), and the cost of
//! the GPU at container start. It reads the GPU and never changes its settings: the only
//! nvidia-smi calls are `-L` and `-q`, inside the container.

pub mod cluster;
pub mod containers;
pub mod discover;
pub mod image;
pub mod report;
pub mod timing;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use graft_driver::discovery::nvidia::NvidiaDiscovery;
use graft_record::RecordStore;

use crate::records::one_device_claim;
use crate::{Containerd, Cri, GraftNri, Testbed, Version};
use report::Report;

/// How the GPU check runs: the node's roots, the binaries, and what to do.
pub struct Options {
    /// The NVIDIA driver's root as a host path (`/`, or `/run/nvidia/driver`).
    pub driver_root: PathBuf,
    /// The host's /proc as seen here.
    pub proc_root: PathBuf,
    /// The host's /sys as seen here.
    pub sys_root: PathBuf,
    /// The host's /dev as seen here.
    pub dev_root: PathBuf,
    /// The static graft-hook the GPU container's createContainer hook runs.
    pub hook: PathBuf,
    /// The compiled integration/gpu/probe.c.
    pub probe: PathBuf,
    /// Scratch space: containerd, graft's state, the image, logs.
    pub work_dir: PathBuf,
    /// Measured rounds of the timing (0: none).
    pub rounds: usize,
    /// Extra environment for the GPU container (the fake libcuda's failure switch).
    pub probe_env: Vec<(String, String)>,
    /// Keep the work directory even when every check passed.
    pub keep: bool,
    /// Run the cluster stage ([`cluster`]) with graft's binaries from this directory (the
    /// release build): the testbed's Kubernetes, graft from its chart.
    pub cluster: Option<PathBuf>,
}

impl Options {
    /// A real node's settings, with the given hook and probe.
    pub fn node(hook: PathBuf, probe: PathBuf) -> Self {
        Options {
            driver_root: "/".into(),
            proc_root: "/proc".into(),
            sys_root: "/sys".into(),
            dev_root: "/dev".into(),
            hook,
            probe,
            work_dir: PathBuf::from(format!("/tmp/graft-gpu-check-{}", std::process::id())),
            rounds: 30,
            probe_env: Vec::new(),
            keep: false,
            cluster: None,
        }
    }
}

impl Options {
    /// The check on a fresh fake NVIDIA node under `dir` (integration/src/fake_gpu.rs), with
    /// the static graft-hook and a freshly compiled probe: CI's and the benchmark's setting.
    pub fn fake(dir: &Path, rounds: usize) -> anyhow::Result<Self> {
        let node = crate::fake_gpu::FakeNode::create(dir)?;
        let probe = dir.join("graft-cuda-probe");
        compile_probe(&probe)?;
        let mut opts = Options::node(crate::testbed::static_hook()?, probe);
        opts.driver_root = node.host;
        opts.proc_root = node.proc;
        opts.sys_root = node.sys;
        opts.dev_root = node.dev;
        opts.work_dir = dir.join("work");
        opts.rounds = rounds;
        Ok(opts)
    }
}

fn progress(msg: &str) {
    eprintln!("== {msg}");
}

/// Compiles integration/gpu/probe.c with the host's C compiler (`cc`) to `out`.
pub fn compile_probe(out: &Path) -> anyhow::Result<()> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("gpu/probe.c");
    let res = Command::new("cc")
        .args(["-O2", "-Wall", "-o"])
        .arg(out)
        .arg(&src)
        .arg("-ldl")
        .output()
        .context("running cc")?;
    if !res.status.success() {
        bail!(
            "cc {}: {}",
            src.display(),
            String::from_utf8_lossy(&res.stderr)
        );
    }
    Ok(())
}

fn first_line(program: &Path, arg: &str) -> String {
    Command::new(program)
        .arg(arg)
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| format!("{} {arg} failed", program.display()))
}

fn os_name() -> String {
    std::fs::read_to_string("/etc/os-release")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_default()
}

/// A `Key : value` line of `nvidia-smi -q`.
fn smi_value(run: &report::Run, key: &str) -> Option<String> {
    let s = containers::section(run.as_ref().ok()?, "nvidia-smi -q");
    s.output
        .lines()
        .find(|l| l.trim_start().starts_with(key))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// The cluster stage on this node's driver: a cluster up, graft installed from the chart,
/// the check's image imported, pods run; the cluster is taken down after.
fn cluster_stage(
    opts: &Options,
    bin: &Path,
    image_tar: &Path,
    dev: &graft_driver::model::Device,
    r: &mut Report,
) -> anyhow::Result<()> {
    cluster::preflight()?;
    let c = crate::cluster::Cluster::up_with(bin, None)?;
    cluster::import_image(image_tar)?;
    let root = opts.driver_root.clone();
    let mut deploy = |v: &crate::cluster::gpu::GpuValues| {
        c.deploy_graft_gpu(bin, crate::cluster::gpu::GpuNode::Driver(&root), v)
    };
    cluster::run(&c, &mut deploy, dev, cluster::gpu_index(dev), r)
}

/// Runs the whole check. Failed checks are in the report; an error means the check could
/// not be set up (no testbed, containerd or graft-nri would not start).
pub async fn run(opts: &Options) -> anyhow::Result<Report> {
    let mut r = Report::default();
    let root = opts.driver_root.display().to_string();
    // Before the scan: it prepares the driver's files below the state directory.
    let work = &opts.work_dir;
    let _ = std::fs::remove_dir_all(work);
    std::fs::create_dir_all(work)?;
    progress(&format!("discovery on driver root {root}"));
    let scan = discover::scan(opts);
    r.discovery = report::discovery(&scan, &root);
    eprint!("{}", r.discovery);
    let Some(dev) = discover::pick(&scan.devices).cloned() else {
        let why = scan
            .error
            .clone()
            .unwrap_or_else(|| "no GPU or MIG device".into());
        r.check("discovery finds a GPU", false, why);
        return Ok(r);
    };
    let uuid = discover::attr(&dev, "uuid");
    r.check(
        "discovery finds a GPU",
        true,
        format!("{} ({uuid}) of {} devices", dev.name, scan.devices.len()),
    );

    // Health: the driver's NVML event registration and one wait, as graft-driver's health
    // monitor does them (nothing is injected into a real GPU).
    let health = NvidiaDiscovery::new(discover::config(opts))
        .and_then(|d| d.nvml_path())
        .map_err(|e| e.to_string())
        .and_then(|lib| {
            graft_driver::discovery::nvidia::health::monitor::check_events(&lib, &scan.devices)
                .map_err(|e| e.to_string())
        });
    match health {
        Ok((registered, gpus)) => r.check(
            "NVML health events register and wait",
            registered == gpus && gpus > 0,
            format!("{registered} of {gpus} GPUs registered for XID, ECC, unavailable and recovery-action events"),
        ),
        Err(e) => r.check("NVML health events register and wait", false, e),
    }

    let tb = Testbed::load()?;
    progress(&format!(
        "containerd 2.2 on private paths under {}",
        work.display()
    ));
    let mut cd = Containerd::start(&tb, Version::V2_2, &work.join("cd"))?;
    progress("building the check's image");
    let built = image::build(&work.join("image"), &opts.probe, &opts.driver_root)?;
    cd.import_image(&built.tar)?;
    for u in &built.unresolved {
        r.notes.push(format!("ldd could not resolve {u}"));
    }
    let state = work.join("graft-state");
    let hook = opts.hook.to_string_lossy().into_owned();
    let mut nri = GraftNri::start(
        &cd.nri_socket,
        &state,
        &work.join("graft-nri.log"),
        &["--hook-path", &hook, "--nvidia-driver-root", &root],
    )?;
    nri.wait_synchronized(Duration::from_secs(60))?;
    let cri = Cri::connect(&cd.socket, &work.join("pods")).await?;

    let pod_uid = format!("gpu-check-{}", std::process::id());
    let mut names = vec!["gpu".to_string()];
    names.extend(timing::all_names(opts.rounds, timing::gpu_name));
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let store = RecordStore::open(&state)?;
    store.put_claim(&one_device_claim(
        &format!("gpu-check-claim-{}", std::process::id()),
        "gpu-check",
        &pod_uid,
        &names,
        &dev.name,
        dev.edits.clone(),
    ))?;
    // The timing's third container: the same device with each driver file mounted on its
    // own, as before the prepared directory, side by side in the same rounds.
    let per_file = discover::scan_with(opts, false)
        .devices
        .into_iter()
        .find(|d| d.name == dev.name);
    if let Some(d) = &per_file {
        let names = timing::all_names(opts.rounds, timing::files_name);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        store.put_claim(&one_device_claim(
            &format!("gpu-check-files-{}", std::process::id()),
            "gpu-check-files",
            &pod_uid,
            &names,
            &d.name,
            d.edits.clone(),
        ))?;
    }
    progress(&format!("pod gpu-check: {} for container gpu", dev.name));
    let pod = cri.run_pod("gpu-check", &pod_uid).await?;
    let env: Vec<(&str, &str)> = opts
        .probe_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let limit = Duration::from_secs(180);
    let gpu = containers::run(&cri, &pod, "gpu", &containers::gpu_commands(), &env, limit)
        .await
        .map_err(report::NotRun::Failed);
    let sibling = containers::run(
        &cri,
        &pod,
        "sibling",
        &containers::sibling_commands(),
        &env,
        limit,
    )
    .await
    .map_err(report::NotRun::Failed);
    report::check_gpu(&mut r, "", &gpu, &dev);
    report::check_sibling(&mut r, "", &sibling);
    r.containers.push((
        format!("Container `gpu` (given {}, {uuid})", dev.name),
        report::container_body(&gpu),
    ));
    r.containers.push((
        "Container `sibling` (given nothing)".into(),
        report::container_body(&sibling),
    ));

    if opts.rounds > 0 {
        for set in timing::SETS {
            progress(&format!(
                "timing {} interleaved rounds: {}",
                opts.rounds, set.2
            ));
            match timing::measure(&cri, &pod, opts.rounds, set, per_file.is_some()).await {
                Ok(t) => r.timing.push(t),
                Err(e) => r.notes.push(format!("timing failed: {e:#}")),
            }
        }
    }

    let or = |v: Option<String>, alt: String| v.filter(|s| !s.is_empty()).unwrap_or(alt);
    r.machine = vec![
        ("GPU".into(), discover::attr(&dev, "productName")),
        (
            "driver".into(),
            or(
                smi_value(&gpu, "Driver Version"),
                discover::attr(&dev, "driverVersion"),
            ),
        ),
        (
            "CUDA".into(),
            or(
                smi_value(&gpu, "CUDA Version"),
                discover::attr(&dev, "cudaDriverVersion"),
            ),
        ),
        ("driver root".into(), root.clone()),
        (
            "kernel".into(),
            std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
        ),
        ("OS".into(), os_name()),
        ("containerd".into(), cri.version().await.unwrap_or_default()),
        (
            "runc".into(),
            first_line(&tb.runc_dir.join("runc"), "--version"),
        ),
    ];

    let _ = cri.remove_pod(&pod).await;
    nri.stop()?;
    cd.teardown();
    if let Some(bin) = &opts.cluster {
        progress("cluster stage: the testbed's Kubernetes, graft from its chart (values-gpu.yaml)");
        if let Err(e) = cluster_stage(opts, bin, &built.tar, &dev, &mut r) {
            r.check("the cluster stage runs", false, format!("{e:#}"));
        }
    }
    if r.passed() && !opts.keep && !crate::mounts::mounted_under(work) {
        let _ = std::fs::remove_dir_all(work);
    } else {
        r.notes.push(format!(
            "containerd, graft-nri and container logs kept under {}",
            work.display()
        ));
    }
    Ok(r)
}
