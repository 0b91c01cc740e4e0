//! What a GPU adds to a container's start, graft's way against NVIDIA's CDI path, on the
//! same fake driver root (integration/src/fake_gpu.rs), side by side in one run.
//!
//! - graft: containerd 2.2 with graft-nri; the pod's record gives the first GPU to its GPU
//!   containers (device nodes, the driver's files, graft-hook as createContainer hook).
//! - NVIDIA: containerd 2.2 reading CDI specs from one directory, with the spec that
//!   `nvidia-ctk cdi generate --mode=nvml` (v1.20.2, built from its Go source by
//!   integration/testbed/build-nvidia-toolkit.sh) writes for the same driver root, whose
//!   hooks are `nvidia-cdi-hook`'s; the GPU container names the GPU by UUID in CRI's
//!   `CDIDevices`.
//!
//! Before the timing, a GPU container on each side must see the GPU's node and the driver's
//! NVML. Each containerd runs in its own mount namespace. A round times CreateContainer +
//! StartContainer of four containers in a rotating order (plain and GPU on each side, the
//! same glibc image running `true`) and removes them. The figure is each side's paired
//! difference (GPU minus plain, per round) and their ratio, with bootstrap intervals over
//! rounds; every call goes to target/bench-samples. Root only.
//!
//!   cargo build --release --workspace --bins && bash hooks/build-static.sh --release
//!   cargo bench -p graft-integration --bench gpu_start_vs_cdi
//!
//! GRAFT_BENCH_ROUNDS: measured rounds (100).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_integration::bench::paired::{bootstrap, differences, quantile_estimate, quantile_of};
use graft_integration::bench::samples::Samples;
use graft_integration::cluster::run;
use graft_integration::cri::Pod;
use graft_integration::fake_gpu::MINORS;
use graft_integration::gpu_check::{discover, image, Options};
use graft_integration::mounts::Scratch;
use graft_integration::records::one_device_claim;
use graft_integration::{Containerd, Cri, GraftNri, Testbed, Version};
use graft_record::RecordStore;

const WARMUP: usize = 5;
const KINDS: [&str; 4] = ["graft-plain", "graft-gpu", "cdi-plain", "cdi-gpu"];

/// `nvidia-ctk cdi generate` for the fake node's driver root into `spec_dir`, with the
/// GPUs' nodes made where the toolkit looks for them (the driver root's /dev).
fn generate_spec(opts: &Options, spec_dir: &Path) -> anyhow::Result<()> {
    let bin = graft_integration::testbed::build_tool("build-nvidia-toolkit.sh")?;
    let dev = opts.driver_root.join("dev");
    std::fs::create_dir_all(&dev)?;
    for (name, minor) in MINORS
        .iter()
        .map(|m| (format!("nvidia{m}"), *m))
        .chain([("nvidiactl".into(), 255), ("nvidia-uvm".into(), 0)])
    {
        let major = if name == "nvidia-uvm" { "236" } else { "195" };
        if !dev.join(&name).exists() {
            run(Command::new("mknod")
                .arg(dev.join(&name))
                .args(["c", major, &minor.to_string()]))?;
        }
    }
    std::fs::create_dir_all(spec_dir)?;
    // The toolkit reads MIG capability minors from the host's /proc/driver: the fake
    // node's is mounted there in a mount namespace of its own.
    let script = format!(
        "mount --bind {proc}/driver /proc/driver && exec {ctk} --quiet cdi generate \
         --mode=nvml --driver-root={root} --nvidia-cdi-hook-path={hook} \
         --output={spec}/nvidia.yaml",
        proc = opts.proc_root.display(),
        ctk = bin.join("nvidia-ctk").display(),
        hook = bin.join("nvidia-cdi-hook").display(),
        root = opts.driver_root.display(),
        spec = spec_dir.display(),
    );
    run(Command::new("unshare").args(["--mount", "--propagation", "private", "sh", "-c", &script]))
        .context("nvidia-ctk cdi generate on the fake node")?;
    Ok(())
}

/// What NVIDIA's spec gives the GPU `uuid` (its own edits and the spec's common ones):
/// device nodes, mounts, and each hook's subcommand.
fn spec_summary(spec_dir: &Path, uuid: &str) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(spec_dir.join("nvidia.yaml"))?;
    let spec: serde_json::Value = serde_norway::from_str(&text)?;
    let device = spec["devices"]
        .as_array()
        .and_then(|ds| ds.iter().find(|d| d["name"] == uuid))
        .context("the spec has no device named by the GPU's UUID")?;
    let (mut nodes, mut mounts, mut hooks) = (0, 0, Vec::new());
    for edits in [&spec["containerEdits"], &device["containerEdits"]] {
        nodes += edits["deviceNodes"].as_array().map_or(0, Vec::len);
        mounts += edits["mounts"].as_array().map_or(0, Vec::len);
        for h in edits["hooks"].as_array().into_iter().flatten() {
            hooks.push(h["args"][1].as_str().unwrap_or("?").to_string());
        }
    }
    Ok(format!(
        "{nodes} device nodes, {mounts} mounts, hooks: {}",
        hooks.join(", ")
    ))
}

/// CreateContainer + StartContainer of `name` (µs); `cdi` names the CDI device to give.
async fn create_start(
    cri: &Cri,
    pod: &Pod,
    name: &str,
    cdi: Option<&str>,
) -> anyhow::Result<(f64, String)> {
    let t = Instant::now();
    let id = create(cri, pod, name, "true", cdi).await?;
    cri.start(&id).await?;
    Ok((t.elapsed().as_secs_f64() * 1e6, id))
}

/// Creates container `name` of the check's image running `script`, with the CDI device
/// `cdi` if given.
async fn create(
    cri: &Cri,
    pod: &Pod,
    name: &str,
    script: &str,
    cdi: Option<&str>,
) -> anyhow::Result<String> {
    match cdi {
        Some(d) => {
            cri.create_with_cdi(pod, name, image::IMAGE, script, &[d])
                .await
        }
        None => cri.create_from(pod, name, image::IMAGE, script, &[]).await,
    }
    .map_err(|s| anyhow::anyhow!("CreateContainer {name}: {}", s.message()))
}

/// What a GPU container must see on either side: the GPU's node and the driver's NVML.
const SEES: &str = "find /dev -name 'nvidia[0-9]*' -type c | grep -q . && \
    ls /usr/lib/graft-nvidia /usr/lib/x86_64-linux-gnu 2>/dev/null | grep -q libnvidia-ml.so && \
    echo SEES-THE-GPU";

/// Runs the check container `name` and waits for its verdict.
async fn sees_the_gpu(cri: &Cri, pod: &Pod, name: &str, cdi: Option<&str>) -> anyhow::Result<()> {
    let id = create(cri, pod, name, SEES, cdi).await?;
    cri.start(&id).await?;
    cri.wait_log(pod, name, "SEES-THE-GPU", Duration::from_secs(30))
        .await
        .with_context(|| format!("{name} does not see the GPU"))?;
    cri.remove_container(&id).await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::var("GRAFT_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(100);
    let dir = Scratch::new(format!("/tmp/graft-gpu-cdi-{}", std::process::id()))?;
    let opts = Options::fake(&dir, 0)?;
    let work = dir.join("work");
    std::fs::create_dir_all(&work)?;
    let scan = discover::scan(&opts);
    let dev = discover::pick(&scan.devices)
        .cloned()
        .with_context(|| format!("no GPU found on the fake node: {:?}", scan.error))?;
    let uuid = discover::attr(&dev, "uuid");
    let tb = Testbed::load()?;
    let built = image::build(&work.join("image"), &opts.probe, &opts.driver_root)?;

    // graft's side: the record names every GPU container of every round.
    let mut cd_graft = Containerd::start(&tb, Version::V2_2, &work.join("a"))?;
    cd_graft.isolate()?;
    cd_graft.import_image(&built.tar)?;
    let state = work.join("graft-state");
    let root = opts.driver_root.display().to_string();
    let hook = opts.hook.display().to_string();
    let mut nri = GraftNri::start(
        &cd_graft.nri_socket,
        &state,
        &work.join("graft-nri.log"),
        &["--hook-path", &hook, "--nvidia-driver-root", &root],
    )?;
    nri.wait_synchronized(Duration::from_secs(60))?;
    let names: Vec<String> = std::iter::once("gpu-check".to_string())
        .chain((0..WARMUP + rounds).map(|r| format!("gpu-{r}")))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let pod_uid = format!("gpu-cdi-bench-{}", std::process::id());
    RecordStore::open(&state)?.put_claim(&one_device_claim(
        "gpu-cdi-bench-claim",
        "gpu-cdi-bench",
        &pod_uid,
        &names,
        &dev.name,
        dev.edits.clone(),
    ))?;
    let cri_graft = Cri::connect(&cd_graft.socket, &work.join("pods-a")).await?;
    let pod_graft = cri_graft.run_pod("gpu-cdi-bench", &pod_uid).await?;

    // NVIDIA's side: the same driver root through its CDI spec.
    let spec_dir = work.join("cdi");
    generate_spec(&opts, &spec_dir)?;
    let mut cd_cdi = Containerd::start(&tb, Version::V2_2, &work.join("b"))?;
    cd_cdi.isolate()?;
    cd_cdi.enable_cdi(&spec_dir)?;
    cd_cdi.import_image(&built.tar)?;
    let cri_cdi = Cri::connect(&cd_cdi.socket, &work.join("pods-b")).await?;
    let pod_cdi = cri_cdi.run_pod("gpu-cdi-bench", "gpu-cdi-bench-b").await?;
    let cdi_name = format!("nvidia.com/gpu={uuid}");

    sees_the_gpu(&cri_graft, &pod_graft, "gpu-check", None).await?;
    sees_the_gpu(&cri_cdi, &pod_cdi, "gpu-check", Some(&cdi_name)).await?;
    let e = &dev.edits;
    println!(
        "graft's record for {}: {} device nodes, {} mounts, {} hooks (graft-hook); NVIDIA's spec: {}",
        dev.name,
        e.device_nodes.len(),
        e.mounts.len(),
        e.hooks.len(),
        spec_summary(&spec_dir, &uuid)?
    );
    println!(
        "GPU container start on the fake node ({} = {uuid}): graft-nri and graft-hook against \
         NVIDIA's CDI spec and nvidia-cdi-hook; {rounds} rounds after {WARMUP} warm-up",
        dev.name
    );
    let mut samples = Samples::create("gpu_start_vs_cdi", &["round", "kind", "us"])?;
    let mut times: [Vec<f64>; 4] = Default::default();
    for r in 0..WARMUP + rounds {
        let mut ids = Vec::new();
        for k in 0..KINDS.len() {
            let kind = (r + k) % KINDS.len();
            let (cri, pod) = if kind < 2 {
                (&cri_graft, &pod_graft)
            } else {
                (&cri_cdi, &pod_cdi)
            };
            let name = match kind {
                1 => format!("gpu-{r}"),
                _ => format!("{}-{r}", KINDS[kind]),
            };
            let cdi = (kind == 3).then_some(cdi_name.as_str());
            let (us, id) = create_start(cri, pod, &name, cdi).await?;
            ids.push((kind, id));
            if r >= WARMUP {
                times[kind].push(us);
                samples.row(&[
                    (r - WARMUP).to_string(),
                    KINDS[kind].into(),
                    format!("{us:.0}"),
                ])?;
            }
        }
        for (kind, id) in ids {
            let cri = if kind < 2 { &cri_graft } else { &cri_cdi };
            cri.remove_container(&id).await?;
        }
    }
    println!("samples: {}", samples.finish()?.display());
    for (k, t) in KINDS.iter().zip(&times) {
        println!(
            "{k:<12} p50 {:.0} µs, p90 {:.0} µs",
            quantile_estimate(t, 0.5),
            quantile_estimate(t, 0.9)
        );
    }
    let graft = differences(&times[1], &times[0]);
    let cdi = differences(&times[3], &times[2]);
    println!(
        "GPU over plain, median of per-round differences: graft {:.0} µs, NVIDIA's CDI path {:.0} µs",
        quantile_estimate(&graft, 0.5),
        quantile_estimate(&cdi, 0.5)
    );
    let ratio = bootstrap(graft.len(), |idx| {
        quantile_of(&graft, idx, 0.5) / quantile_of(&cdi, idx, 0.5)
    });
    println!("graft / NVIDIA's CDI path (goal <= 0.35): {ratio:.2}");
    ensure!(ratio.value.is_finite(), "no ratio");
    let _ = cri_graft.remove_pod(&pod_graft).await;
    let _ = cri_cdi.remove_pod(&pod_cdi).await;
    nri.stop()?;
    cd_graft.teardown();
    cd_cdi.teardown();
    Ok(())
}
