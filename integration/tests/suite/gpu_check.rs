//! The GPU check (integration/gpu/check.sh's path) on the fake node, as CI runs it without
//! a GPU: the fake driver libraries need what the real ones need; the check passes on the
//! fake libcuda and nvidia-smi and produces a timing table; and a failing CUDA probe is a
//! failed check.
//!
//! The containerd part needs root, the testbed and the workspace binaries; the README's
//! test command provides them.

use std::path::Path;
use std::process::Command;

use anyhow::{ensure, Context};
use graft_integration::fake_gpu::{self, FakeNode, DRIVER_VERSION, LIB_DIR};
use graft_integration::gpu_check::{self, Options};
use graft_integration::mounts::Scratch;

/// `readelf -d` of a library: (NEEDED names, SONAME).
fn dynamic(lib: &Path) -> anyhow::Result<(Vec<String>, Option<String>)> {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(lib)
        .output()
        .context("readelf")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let value = |l: &str| {
        l.split_once('[')
            .and_then(|(_, r)| r.split_once(']'))
            .map(|(v, _)| v.to_string())
    };
    let needed = text
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(value)
        .collect();
    let soname = text
        .lines()
        .find(|l| l.contains("(SONAME)"))
        .and_then(value);
    Ok((needed, soname))
}

#[test]
fn fake_driver_libraries_need_what_the_real_ones_do() -> anyhow::Result<()> {
    // The real libnvidia-ml.so.1 and libcuda.so.1 need these; an image without them
    // fails on a GPU node, so it must fail on the fakes too.
    let real = [
        "libpthread.so.0",
        "libdl.so.2",
        "libm.so.6",
        "librt.so.1",
        "libc.so.6",
    ];
    for lib in [fake_gpu::fake_nvml_lib()?, fake_gpu::fake_cuda_lib()?] {
        let (needed, _) = dynamic(&lib)?;
        for want in real {
            ensure!(
                needed.iter().any(|n| n == want),
                "{} lacks NEEDED {want}: {needed:?}",
                lib.display()
            );
        }
    }
    // Found by soname once loaded by path, as NVML's dlopen("libcuda.so.1") needs.
    let (_, soname) = dynamic(&fake_gpu::fake_cuda_lib()?)?;
    ensure!(soname.as_deref() == Some("libcuda.so.1"), "{soname:?}");

    // The node's nvidia-smi is a static ELF executable holding the driver version.
    let dir = tempfile::tempdir()?;
    let node = FakeNode::create(dir.path())?;
    let smi = std::fs::read(node.host.join("usr/bin/nvidia-smi"))?;
    ensure!(smi.starts_with(b"\x7fELF"), "nvidia-smi is not ELF");
    ensure!(
        smi.windows(DRIVER_VERSION.len())
            .any(|w| w == DRIVER_VERSION.as_bytes()),
        "nvidia-smi lacks {DRIVER_VERSION}"
    );
    let interp = Command::new("readelf")
        .arg("-l")
        .arg(node.host.join("usr/bin/nvidia-smi"))
        .output()?;
    ensure!(
        !String::from_utf8_lossy(&interp.stdout).contains("INTERP"),
        "nvidia-smi is dynamically linked"
    );
    let (_, soname) = dynamic(
        &node
            .host
            .join(&LIB_DIR[1..])
            .join(format!("libcuda.so.{DRIVER_VERSION}")),
    )?;
    ensure!(
        soname.as_deref() == Some("libcuda.so.1"),
        "FakeNode's libcuda is not the fake CUDA driver"
    );
    Ok(())
}

/// The check's options on a fresh fake node under `dir`.
fn fake_node_options(dir: &Path, rounds: usize) -> anyhow::Result<Options> {
    Options::fake(dir, rounds)
}

fn scratch(tag: &str) -> anyhow::Result<Scratch> {
    Scratch::new(format!("/tmp/graft-gck-{tag}-{}", std::process::id()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gpu_check_passes_on_the_fake_node() -> anyhow::Result<()> {
    let dir = scratch("pass")?;
    let opts = fake_node_options(&dir, 3)?;
    let started = std::time::Instant::now();
    let report = gpu_check::run(&opts).await?;
    let md = report.markdown();
    println!("{md}\n(the check took {:?})", started.elapsed());
    for want in [
        "- PASS: discovery finds a GPU",
        // gpu-2 is NVML index 0, the fake NVML's first UUID.
        "- PASS: nvidia-smi -L lists the GPU's UUID (GPU-6a1f0000-93c1-4d4e-8f7b-0c5e2a900000",
        "- PASS: nvidia-smi -q shows the driver version",
        "- PASS: the CUDA probe passes (PROBE PASS: vector add of 1048576 floats on NVIDIA H100 80GB HBM3 (fake))",
        "- PASS: no /dev/nvidia* node graft did not inject",
        "- PASS: the sibling container sees no GPU",
        "Driver Version                            : 580.95.05",
        "| plain | 3 |",
        "| GPU (graft-injected) | 3 |",
        "median ratio GPU/plain:",
    ] {
        ensure!(md.contains(want), "{want:?} not in the report");
    }
    ensure!(report.passed());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_cuda_probe_fails_the_check() -> anyhow::Result<()> {
    let dir = scratch("fail")?;
    let mut opts = fake_node_options(&dir, 0)?;
    opts.probe_env = vec![("GRAFT_FAKE_CUDA_FAIL".into(), "1".into())];
    let report = gpu_check::run(&opts).await?;
    let md = report.markdown();
    println!("{md}");
    ensure!(
        md.contains(
            "- FAIL: the CUDA probe passes (PROBE FAIL: cuInit: error 999 CUDA_ERROR_UNKNOWN"
        ),
        "no failed probe check in the report"
    );
    ensure!(md.contains("**FAIL: "), "the verdict is not FAIL");
    ensure!(!report.passed());
    // Everything else still holds: only the probe failed.
    let failed: Vec<&str> = report
        .checks
        .iter()
        .filter(|c| !c.pass)
        .map(|c| c.name.as_str())
        .collect();
    ensure!(failed == ["the CUDA probe passes"], "{failed:?}");
    Ok(())
}
