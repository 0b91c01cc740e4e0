//! `graft-driver`: the DRA kubelet plugin daemon. This file parses the flags and sets the
//! process up (graft-runtime, and the allocator); [`assembly`] does the rest.

use std::time::Instant;

use clap::Parser;
use graft_runtime::{Signals, Workers};

mod args;
mod assembly;
mod cleanup;
mod endpoints;
mod rescan;
use args::Args;

fn main() -> anyhow::Result<()> {
    // A probe needs none of the daemon's settings: answered before they are parsed.
    graft_runtime::exit_if_probe(args::DEFAULT_HEALTH_SOCKET);
    let started = Instant::now();
    // SAFETY: mallopt before any other thread exists (the tokio runtime is built below);
    // caps glibc's per-thread arenas, which otherwise dominate a small daemon's RSS.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
    graft_runtime::private_umask();
    let args = Args::parse();
    // Held until main returns: dropping it writes out the lines still buffered.
    let _logs = graft_runtime::init_logs(args.log_format, None)?;
    // Two workers whatever the node's core count: the driver's work is a few RPCs at a time.
    graft_runtime::block_on(Workers::Fixed(2), async move {
        let mut signals = Signals::install()?;
        let shutdown = async move {
            signals.recv().await;
        };
        assembly::run(args, started, shutdown).await
    })?
}
