//! What graft's daemons (graft-driver, graft-mps, graft-nri, the ComputeDomain controller,
//! graft-imex-daemon, the scheduler extender) share to run, so that each entry point holds
//! only what is its own:
//!
//! - [`process`]: the `--probe live|ready` early exit, the private file mode mask, the log
//!   output, and the tokio runtime, built after what needs a single-threaded process.
//! - [`telemetry`]: the `/metrics`, `/healthz` and `/readyz` server (graft-telemetry) with
//!   the daemon's metrics and readiness checks.
//! - [`tasks`]: the [`Daemon`] owning every long-running task by name; a task that ends
//!   before shutdown fails readiness and can end the daemon with an error naming it.
//! - [`signals`]: SIGTERM and SIGINT begin a graceful shutdown, which has a deadline.

mod error;
pub mod process;
pub mod signals;
pub mod tasks;
pub mod telemetry;

pub use error::{How, RuntimeError, ShutdownOverdue, TaskFailed, TasksStopped};
pub use process::{block_on, exit_if_probe, init_logs, private_umask, LogGuard, Workers};
pub use signals::{stop_flag, Signals, Stop};
pub use tasks::{Daemon, Ended, Ends};
pub use telemetry::Telemetry;
