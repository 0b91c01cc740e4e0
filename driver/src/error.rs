//! The driver library's typed errors.

use std::path::PathBuf;

use graft_record::RecordError;

pub type Result<T, E = DriverError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The device config file is unreadable or says something invalid.
    #[error("device config {path}: {reason}")]
    Config { path: PathBuf, reason: String },
    /// A discovery backend failed as a whole.
    #[error("{backend} discovery: {reason}")]
    Discovery {
        backend: &'static str,
        reason: String,
    },
    /// The prepare checkpoint is unreadable or cannot be written.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint { path: PathBuf, reason: String },
    #[error("plugin socket {path}: {reason}")]
    Socket { path: PathBuf, reason: String },
    /// The injection policy (hook path, allowed mount roots) is misconfigured.
    #[error("injection policy: {0}")]
    Policy(#[from] graft_record::InvalidRecord),
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error("kubernetes API: {0}")]
    Api(#[from] kube::Error),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl DriverError {
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DriverError::Io {
            what,
            path: path.into(),
            source,
        }
    }
}
