//! A daemon's process, before its work starts: the `--probe` early exit, the file mode
//! mask, the log output and the tokio runtime, the same way for every daemon.

use std::future::Future;
use std::io::{IsTerminal, Write};
use std::path::Path;

use graft_telemetry::logs::LogFormat;
use tracing_appender::non_blocking::{NonBlocking, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::fmt::writer::BoxMakeWriter;

use crate::error::RuntimeError;

/// When the command line asks for a probe (`--probe live|ready`), answers it and exits the
/// process: 0 when the daemon answered 200, 1 when it did not (the reason on stderr), 2 when
/// the probe's own flags are wrong. A probe needs none of the daemon's settings: call this
/// before they are parsed, and before any thread exists.
pub fn exit_if_probe(default_socket: &str) {
    let argv: Vec<String> = std::env::args().collect();
    if let Some(code) = probe_code(&argv, default_socket) {
        std::process::exit(code);
    }
}

/// The probe's exit status when `argv` asks for one ([`exit_if_probe`]), `None` otherwise.
pub fn probe_code(argv: &[String], default_socket: &str) -> Option<i32> {
    let asked = graft_telemetry::probe::requested(argv, default_socket)?;
    Some(asked.unwrap_or_else(|e| {
        eprintln!("{e}");
        2
    }))
}

/// Everything the daemon creates (state, records, sockets) is root's alone: explicit modes
/// follow, this closes the window between creating and chmod.
pub fn private_umask() {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
}

/// Most log lines waiting for the log thread (a line is the formatted event, usually well
/// under 1 KiB): while the output is stuck (a full pipe, a hung disk), lines past these are
/// dropped, so that memory stays bounded and no caller ever waits for the output.
pub const LOG_BUFFER_LINES: usize = 4096;

/// The log thread of [`init_logs`]. Dropping it hands the thread the lines still buffered
/// and waits for them to be written (about a second at most, should the output be stuck):
/// hold it until `main` returns, and drop it before any `std::process::exit`.
#[must_use = "dropping the guard ends the log output: hold it until main returns"]
#[derive(Debug)]
pub struct LogGuard {
    _worker: WorkerGuard,
}

/// Installs the log output: `file` (appended to; for a daemon whose stderr is /dev/null),
/// else stderr, coloured when it is a terminal. The lines are written by a thread of their
/// own ([`LOG_BUFFER_LINES`] at most waiting, more are dropped), so that logging never blocks
/// a caller, such as graft-nri answering CreateContainer while the runtime waits. Starts
/// that thread: call it after whatever needs a single-threaded process (mallopt, setns).
pub fn init_logs(format: LogFormat, file: Option<&Path>) -> Result<LogGuard, RuntimeError> {
    let ((writer, guard), ansi) = match file {
        Some(path) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|source| RuntimeError::LogFile {
                    path: path.to_path_buf(),
                    source,
                })?;
            (off_thread(f, LOG_BUFFER_LINES), false)
        }
        None => (
            off_thread(std::io::stderr(), LOG_BUFFER_LINES),
            std::io::stderr().is_terminal(),
        ),
    };
    graft_telemetry::logs::init(format, BoxMakeWriter::new(writer), ansi);
    Ok(LogGuard { _worker: guard })
}

/// A writer that hands each line to a thread writing them to `out`; lossy: past `lines`
/// waiting, a line is dropped rather than the caller blocked.
fn off_thread<W: Write + Send + 'static>(out: W, lines: usize) -> (NonBlocking, WorkerGuard) {
    NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(lines)
        .thread_name("graft-logs")
        .finish(out)
}

/// How many worker threads the tokio runtime has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// One per core (tokio's default): for the cluster-wide daemons.
    PerCore,
    /// This many: a node daemon's work is a few requests at a time, and per-core threads
    /// (and their malloc arenas) would only add memory.
    Fixed(usize),
}

/// Builds the multi-threaded tokio runtime (every driver enabled) and runs `main` on it.
/// Built here rather than by `#[tokio::main]`, so that what must happen while the process
/// has one thread (the probe, mallopt, setns) happens before.
pub fn block_on<F: Future>(workers: Workers, main: F) -> Result<F::Output, RuntimeError> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Workers::Fixed(n) = workers {
        builder.worker_threads(n.max(1));
    }
    let rt = builder
        .enable_all()
        .build()
        .map_err(RuntimeError::Runtime)?;
    Ok(rt.block_on(main))
}

#[cfg(test)]
mod tests;
