//! graft-driver's memory against NVIDIA's DRA kubelet plugin (`gpu-kubelet-plugin` of
//! NVIDIA/k8s-dra-driver-gpu, built from its source) on the same fake NVIDIA node
//! (integration/src/fake_gpu.rs: eight GPUs, two of them in MIG mode, through the fake
//! NVML), each publishing its devices to the same real API server, side by side in one run.
//!
//! Memory is read from `/proc/<pid>/smaps_rollup` (`bench::mem`): anonymous plus dirty pages
//! are what a process holds that the kernel cannot drop; clean private file pages (its
//! binary) can be dropped, though they are charged to its cgroup until then. Sampled five
//! times a second apart once both have published, medians.
//!
//!   cargo build --release --workspace --bins && bash hooks/build-static.sh --release
//!   cargo bench -p graft-integration --bench driver_memory_vs_nvidia
//!
//! NVIDIA's plugin is built by integration/testbed/build-gpu-kubelet-plugin.sh (where the
//! machine cannot clone from the network, `DRA_GPU_GIT=<a clone>`), or taken from
//! `GPU_KUBELET_PLUGIN=<binary>`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_integration::apiserver;
use graft_integration::bench::mem::Footprint;
use graft_integration::bench::paired::quantile;
use graft_integration::dra_node::DraNode;
use graft_integration::fake_gpu::{FakeNode, LIB_DIR};
use graft_integration::testbed::static_hook;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, ListParams, PostParams};

const GRAFT_NODE: &str = "mem-graft";
const NVIDIA_NODE: &str = "mem-nvidia";
const SAMPLES: usize = 5;

/// NVIDIA's kubelet plugin on the fake node; killed on drop.
struct NvidiaPlugin(Child);

impl NvidiaPlugin {
    fn start(bin: &Path, kubeconfig: &Path, node: &FakeNode, dir: &Path) -> anyhow::Result<Self> {
        let log = std::fs::File::create(dir.join("gpu-kubelet-plugin.log"))?;
        for d in ["cdi", "registry", "plugins"] {
            std::fs::create_dir_all(dir.join(d))?;
        }
        let child = Command::new(bin)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--node-name", NVIDIA_NODE, "--image-name", "bench"])
            .arg("--cdi-root")
            .arg(dir.join("cdi"))
            .arg("--nvidia-driver-root")
            .arg(&node.host)
            .arg("--container-driver-root")
            .arg(&node.host)
            .args(["--nvidia-cdi-hook-path", "/bin/true"])
            // NVML finds the CUDA driver version by loading libcuda.so.1 by name, which a
            // GPU node's loader finds in its default path; the fake node's is here.
            .env("LD_LIBRARY_PATH", node.host.join(&LIB_DIR[1..]))
            .arg("--kubelet-registrar-directory-path")
            .arg(dir.join("registry"))
            .arg("--kubelet-plugins-directory-path")
            .arg(dir.join("plugins"))
            .stdout(log.try_clone()?)
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Self(child))
    }
}

impl Drop for NvidiaPlugin {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Devices published for `node`, by any driver.
async fn published(client: &kube::Client, node: &str) -> anyhow::Result<usize> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let lp = ListParams::default().fields(&format!("spec.nodeName={node}"));
    Ok(api
        .list(&lp)
        .await?
        .items
        .iter()
        .map(|s| s.spec.devices.as_ref().map_or(0, Vec::len))
        .sum())
}

fn median(xs: &mut [f64]) -> f64 {
    quantile(xs, 0.5)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let bin = match std::env::var_os("GPU_KUBELET_PLUGIN") {
        Some(b) => PathBuf::from(b),
        None => graft_integration::testbed::build_tool("build-gpu-kubelet-plugin.sh")?,
    };
    let cp = apiserver::shared()?;
    let client = cp.client().await?;
    let dir = tempfile::Builder::new().prefix("gm").tempdir_in("/tmp")?;
    let node = FakeNode::create(&dir.path().join("node"))?;

    let hook = dir.path().join("bin/graft-hook");
    let mut args = vec!["--discovery".to_string(), "nvidia".to_string()];
    args.extend(node.nvidia_args(&hook, &static_hook()?));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let graft = DraNode::start_with(cp, GRAFT_NODE, "", &args).await?;

    let nodes: Api<Node> = Api::all(client.clone());
    if nodes.get_opt(NVIDIA_NODE).await?.is_none() {
        let mut n = Node::default();
        n.metadata.name = Some(NVIDIA_NODE.into());
        nodes.create(&PostParams::default(), &n).await?;
    }
    let nv_dir = dir.path().join("nvidia");
    std::fs::create_dir_all(&nv_dir)?;
    let mut nvidia = NvidiaPlugin::start(&bin, &cp.kubeconfig, &node, &nv_dir)?;

    let t = Instant::now();
    let (mut g, mut n) = (0, 0);
    while g == 0 || n == 0 {
        if let Some(st) = nvidia.0.try_wait()? {
            anyhow::bail!(
                "gpu-kubelet-plugin exited ({st}):\n{}",
                std::fs::read_to_string(nv_dir.join("gpu-kubelet-plugin.log")).unwrap_or_default()
            );
        }
        ensure!(
            t.elapsed() < Duration::from_secs(90),
            "not both published within 90 s (graft {g}, NVIDIA {n} devices); NVIDIA's log:\n{}",
            std::fs::read_to_string(nv_dir.join("gpu-kubelet-plugin.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        g = published(&client, GRAFT_NODE).await?;
        n = published(&client, NVIDIA_NODE).await?;
    }
    // Settled: start-up's transient allocations freed or not, as a running node sees them.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let graft_pid = graft.driver.pid().context("graft-driver is not running")?;
    let nvidia_pid = nvidia.0.id();
    let mut f: [[Vec<f64>; 3]; 2] = Default::default();
    for _ in 0..SAMPLES {
        for (i, pid) in [graft_pid, nvidia_pid].into_iter().enumerate() {
            let m = Footprint::of(pid);
            f[i][0].push(m.rss as f64 / 1024.0);
            f[i][1].push(m.own() as f64 / 1024.0);
            f[i][2].push(m.private_clean as f64 / 1024.0);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    println!(
        "Idle after publishing, the same fake node: graft-driver {g} devices, gpu-kubelet-plugin {n} devices; MiB, median of {SAMPLES} samples"
    );
    println!("| process | RSS | anonymous + dirty | clean private file pages |");
    println!("|---|---|---|---|");
    let mut own = [0.0; 2];
    for (i, name) in ["graft-driver", "gpu-kubelet-plugin"]
        .into_iter()
        .enumerate()
    {
        let [rss, o, clean] = &mut f[i];
        own[i] = median(o);
        println!(
            "| {name} | {:.1} | {:.1} | {:.1} |",
            median(rss),
            own[i],
            median(clean)
        );
    }
    println!(
        "graft-driver / gpu-kubelet-plugin, anonymous + dirty: {:.2} (goal <= 0.5)",
        own[0] / own[1]
    );
    Ok(())
}
