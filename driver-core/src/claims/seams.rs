//! What the core asks of the world besides its files, behind small traits so that unit
//! tests replace them: whether graft-nri is ready to inject, and where a test wants the
//! process to die.

use std::path::PathBuf;
use std::sync::Arc;

use graft_record::{nri_readiness, NriReadiness, RecordError};

/// Why a container created now would not get its devices.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NotReady {
    /// graft-nri's status says why: not connected, not synchronized, gone.
    #[error("{0}")]
    Status(String),
    /// graft-nri's status file or liveness lock cannot be read.
    #[error(transparent)]
    Unreadable(Arc<RecordError>),
    /// The check itself did not finish (its thread panicked or was cancelled).
    #[error("checking graft-nri's status failed: {0}")]
    Unchecked(Arc<tokio::task::JoinError>),
}

/// Whether a container created now would get its devices.
pub trait NriGate: Send + Sync {
    /// `Err(why)` while graft-nri is not connected and synchronized.
    fn ready(&self) -> Result<(), NotReady>;
}

/// graft-nri's status file and liveness lock in the state directory.
pub struct StatusFile {
    /// graft's state directory.
    pub state_dir: PathBuf,
    /// This boot's id: a status from another boot is stale.
    pub boot_id: String,
}

impl NriGate for StatusFile {
    fn ready(&self) -> Result<(), NotReady> {
        match nri_readiness(&self.state_dir, &self.boot_id) {
            Ok(NriReadiness::Ready(_)) => Ok(()),
            Ok(NriReadiness::NotReady(why)) => Err(NotReady::Status(why)),
            Err(e) => Err(NotReady::Unreadable(Arc::new(e))),
        }
    }
}

/// A point between two durable steps, where a test may kill the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum CrashPoint {
    /// `PrepareStarted` saved, nothing done yet.
    AfterStarted,
    /// The claim's device setups applied, no record yet.
    AfterSetup,
    /// The record written, `PrepareCompleted` not yet saved.
    AfterRecord,
    /// `PrepareCompleted` saved.
    AfterCompleted,
    /// An unprepare undid the setups, the record is still there.
    UnprepareAfterUndo,
    /// An unprepare removed the record, the entry is still there.
    UnprepareAfterRecord,
}

/// The process stopped at a crash point (only a test's hook returns this; the binary's
/// kills itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("crashed at {0:?}")]
pub struct Crashed(pub CrashPoint);

/// Where a test stops the process at a crash point.
pub trait CrashHook: Send + Sync {
    /// Called at each crash point; `Err` stops the operation where it is, with nothing
    /// undone, as a killed process would.
    fn at(&self, point: CrashPoint) -> Result<(), Crashed>;
}

/// Production: nothing happens.
pub struct NoCrash;

impl CrashHook for NoCrash {
    fn at(&self, _: CrashPoint) -> Result<(), Crashed> {
        Ok(())
    }
}

/// `--crash-at`: the process kills itself with SIGKILL at that point (integration tests
/// restart it and check what the next start recovers).
pub struct KillAt(pub CrashPoint);

impl CrashHook for KillAt {
    fn at(&self, point: CrashPoint) -> Result<(), Crashed> {
        if point == self.0 {
            tracing::warn!(?point, "crash point reached; killing this process");
            let _ = nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::SIGKILL);
        }
        Ok(())
    }
}
