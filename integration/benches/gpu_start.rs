//! What a GPU costs at container start, against a plain container in the same run: the
//! GPU check (integration/gpu/) on the fake NVIDIA node, with 30 interleaved rounds per
//! image, release build. The fake driver root gives the real mounts, device nodes and
//! createContainer hook; only the GPU itself is missing, which container start does not
//! touch.
//!
//!   cargo build --release --workspace --bins && bash hooks/build-static.sh --release
//!   cargo bench -p graft-integration --bench gpu_start

use graft_integration::gpu_check::{self, Options};
use graft_integration::mounts::Scratch;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let rounds = std::env::var("GRAFT_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(30);
    let dir = Scratch::new(format!("/tmp/graft-gpu-bench-{}", std::process::id()))?;
    let opts = Options::fake(&dir, rounds)?;
    let report = gpu_check::run(&opts).await?;
    let md = report.markdown();
    let timing = md
        .split("\n## Container start")
        .nth(1)
        .map(|t| format!("## Container start{t}"))
        .unwrap_or(md.clone());
    println!("{timing}");
    anyhow::ensure!(report.passed(), "the GPU check failed:\n{md}");
    Ok(())
}
