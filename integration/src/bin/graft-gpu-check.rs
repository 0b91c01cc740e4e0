//! `graft-gpu-check`: graft on a node with an NVIDIA GPU, end to end (see
//! integration/gpu/check.sh, which builds everything and runs this as root). Writes a
//! markdown report; exits 0 when every check passed, 1 when one failed, 2 when the check
//! could not run.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use graft_integration::gpu_check::{self, Options};

#[derive(Debug, Parser)]
#[command(
    name = "graft-gpu-check",
    about = "graft on an NVIDIA node, end to end"
)]
struct Args {
    /// The NVIDIA driver's root as a host path (`/`, or `/run/nvidia/driver`).
    #[arg(long, default_value = "/")]
    driver_root: PathBuf,
    #[arg(long, default_value = "/proc")]
    proc_root: PathBuf,
    #[arg(long, default_value = "/sys")]
    sys_root: PathBuf,
    #[arg(long, default_value = "/dev")]
    dev_root: PathBuf,
    /// The static graft-hook (default: `graft-hook` next to this binary, else the one
    /// hooks/build-static.sh built).
    #[arg(long)]
    hook: Option<PathBuf>,
    /// The compiled integration/gpu/probe.c (default: compiled here with `cc`).
    #[arg(long)]
    probe: Option<PathBuf>,
    /// Interleaved rounds of the container start timing.
    #[arg(long, default_value_t = 30)]
    rounds: usize,
    /// Where to write the markdown report (default: stdout).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Scratch directory (default: /tmp/graft-gpu-check-<pid>).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep the scratch directory (containerd, graft-nri and container logs).
    #[arg(long)]
    keep: bool,
    /// Also run the cluster stage: the testbed's single-node Kubernetes on this node, graft
    /// installed from its chart with the GPU values, pods with claims (the CUDA probe, a
    /// sibling without the claim, two MPS shares), health events registered. graft's
    /// binaries come from this program's directory (the release build).
    #[arg(long)]
    cluster: bool,
}

fn hook(arg: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(h) = arg {
        return Ok(h);
    }
    let next_to_me = std::env::current_exe()?.with_file_name("graft-hook");
    if next_to_me.is_file() {
        return Ok(next_to_me);
    }
    graft_integration::testbed::static_hook()
}

async fn run(args: Args) -> anyhow::Result<bool> {
    let mut opts = Options::node(hook(args.hook)?, PathBuf::new());
    if let Some(w) = args.work_dir {
        opts.work_dir = w;
    }
    opts.probe = match args.probe {
        Some(p) => p,
        None => {
            std::fs::create_dir_all(&opts.work_dir)?;
            let p = opts.work_dir.with_extension("probe");
            gpu_check::compile_probe(&p)?;
            p
        }
    };
    opts.driver_root = args.driver_root;
    opts.proc_root = args.proc_root;
    opts.sys_root = args.sys_root;
    opts.dev_root = args.dev_root;
    opts.rounds = args.rounds;
    opts.keep = args.keep;
    if args.cluster {
        let exe = std::env::current_exe()?;
        opts.cluster = exe.parent().map(PathBuf::from);
    }
    // Lets the fake node's tests make the fake libcuda fail; meaningless on a real node.
    if let Ok(v) = std::env::var("GRAFT_FAKE_CUDA_FAIL") {
        opts.probe_env.push(("GRAFT_FAKE_CUDA_FAIL".into(), v));
    }
    let report = gpu_check::run(&opts).await?;
    let md = report.markdown();
    match &args.report {
        Some(path) => {
            std::fs::write(path, &md)?;
            eprintln!("== report written to {}", path.display());
        }
        None => print!("{md}"),
    }
    let verdict = if report.passed() { "PASS" } else { "FAIL" };
    eprintln!("== {verdict}");
    Ok(report.passed())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("graft-gpu-check: {e:#}");
            ExitCode::from(2)
        }
    }
}
