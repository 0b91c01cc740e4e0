//! The driver library's typed errors.

use std::path::PathBuf;

use graft_record::RecordError;

use crate::core::lifecycle::InvalidStep;
use crate::discovery::config::InvalidEntry;

pub type Result<T, E = DriverError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The device config file is unreadable or says something invalid.
    #[error("device config {path}: {reason}")]
    Config { path: PathBuf, reason: String },
    /// The device config file cannot be read.
    #[error("device config {path}: cannot read: {source}")]
    ConfigRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The device config file is not TOML of its schema.
    #[error("device config {path}: {source}")]
    ConfigParse {
        path: PathBuf,
        #[source]
        source: Box<toml::de::Error>,
    },
    /// An entry of the device config is refused (`entry`: which, e.g. `devices[0] (/dev/x)`).
    #[error("device config {path}: {entry}: {source}")]
    ConfigEntry {
        path: PathBuf,
        entry: String,
        #[source]
        source: Box<InvalidEntry>,
    },
    /// A glob of the device config does not parse.
    #[error("device config {path}: path {pattern}: {source}")]
    ConfigGlob {
        path: PathBuf,
        pattern: String,
        #[source]
        source: glob::PatternError,
    },
    /// A discovery backend failed as a whole.
    #[error("{backend} discovery: {reason}")]
    Discovery {
        backend: &'static str,
        reason: String,
    },
    /// The prepare checkpoint is unreadable or cannot be written.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint { path: PathBuf, reason: String },
    /// The checkpoint's lock cannot be taken.
    #[error("checkpoint {path}: cannot take the lock: {source}")]
    CheckpointLock {
        path: PathBuf,
        #[source]
        source: std::fs::TryLockError,
    },
    /// The checkpoint cannot be encoded.
    #[error("checkpoint {path}: cannot encode: {source}")]
    CheckpointEncode {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A claim's step its life cycle does not allow (`claim`: its uid).
    #[error("checkpoint {claim}: {source}")]
    Step {
        claim: PathBuf,
        #[source]
        source: InvalidStep,
    },
    #[error("plugin socket {path}: {reason}")]
    Socket { path: PathBuf, reason: String },
    /// The plugin socket cannot be set up (`what`: the step, e.g. `bind`).
    #[error("plugin socket {path}: {what}: {source}")]
    SocketIo {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
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
