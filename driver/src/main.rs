//! `graft-driver`: the DRA kubelet plugin daemon. This file parses the flags, sets the
//! process up (allocator, umask, logs) and handles signals; [`assembly`] does the rest.

use std::io::IsTerminal;
use std::time::Instant;

use clap::Parser;
use tokio::signal::unix::{signal, SignalKind};
use tracing_subscriber::fmt::writer::BoxMakeWriter;

mod args;
mod assembly;
mod cleanup;
mod endpoints;
mod rescan;
use args::Args;

// Two workers whatever the node's core count: the driver's work is a few RPCs at a time, and
// per-core threads (and their malloc arenas) would only add memory.
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    // A probe needs none of the daemon's settings: answered before they are parsed.
    let argv: Vec<String> = std::env::args().collect();
    if let Some(code) = graft_telemetry::probe::requested(&argv, args::DEFAULT_HEALTH_SOCKET) {
        std::process::exit(code.unwrap_or_else(|e| {
            eprintln!("{e}");
            2
        }));
    }
    let started = Instant::now();
    // SAFETY: mallopt before any other thread exists; caps glibc's per-thread arenas, which
    // otherwise dominate a small daemon's RSS.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
    // Everything graft creates (state, records, sockets) is root's alone; explicit modes
    // follow, this closes the window between creating and chmod.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let args = Args::parse();
    graft_telemetry::logs::init(
        args.log_format,
        BoxMakeWriter::new(std::io::stderr),
        std::io::stderr().is_terminal(),
    );
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let shutdown = async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    };
    assembly::run(args, started, shutdown).await
}
