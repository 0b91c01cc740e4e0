//! The driver library's typed errors.

use std::path::PathBuf;

use graft_record::RecordError;

/// A driver library result.
pub type Result<T, E = DriverError> = std::result::Result<T, E>;

/// Why the driver library could not do something.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The device config file is unreadable or says something invalid.
    #[error("device config {path}: {reason}")]
    Config {
        /// The device config file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The device config file cannot be read.
    #[error("device config {path}: cannot read: {source}")]
    ConfigRead {
        /// The device config file.
        path: PathBuf,
        /// The read's error.
        #[source]
        source: std::io::Error,
    },
    /// The device config file is not TOML of its schema.
    #[error("device config {path}: {source}")]
    ConfigParse {
        /// The device config file.
        path: PathBuf,
        /// The parser's error.
        #[source]
        source: Box<toml::de::Error>,
    },
    /// An entry of the device config is refused (`entry`: which, e.g. `devices[0] (/dev/x)`).
    #[error("device config {path}: {entry}: {source}")]
    ConfigEntry {
        /// The device config file.
        path: PathBuf,
        /// Which entry.
        entry: String,
        /// Why it is refused (discovery's `InvalidEntry`; boxed so that this crate-wide
        /// error, which discovery uses, names no type of discovery's).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A glob of the device config does not parse.
    #[error("device config {path}: path {pattern}: {source}")]
    ConfigGlob {
        /// The device config file.
        path: PathBuf,
        /// The glob.
        pattern: String,
        /// The parser's error.
        #[source]
        source: glob::PatternError,
    },
    /// A discovery backend failed as a whole.
    #[error("{backend} discovery: {reason}")]
    Discovery {
        /// The backend's name.
        backend: &'static str,
        /// What failed.
        reason: String,
    },
    /// The prepare checkpoint is unreadable or cannot be written.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint {
        /// The checkpoint file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The checkpoint's lock cannot be taken.
    #[error("checkpoint {path}: cannot take the lock: {source}")]
    CheckpointLock {
        /// The checkpoint file.
        path: PathBuf,
        /// Why the lock was not taken.
        #[source]
        source: std::fs::TryLockError,
    },
    /// The checkpoint cannot be encoded.
    #[error("checkpoint {path}: cannot encode: {source}")]
    CheckpointEncode {
        /// The checkpoint file.
        path: PathBuf,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// A claim's step its life cycle does not allow (`claim`: its uid).
    #[error("checkpoint {claim}: {source}")]
    Step {
        /// The claim's UID.
        claim: PathBuf,
        /// The step refused (the life cycle's `InvalidStep`; boxed so that this crate-wide
        /// error, which claims uses, names no type of claims').
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The plugin socket cannot be served.
    #[error("plugin socket {path}: {reason}")]
    Socket {
        /// The socket.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The plugin socket cannot be set up (`what`: the step, e.g. `bind`).
    #[error("plugin socket {path}: {what}: {source}")]
    SocketIo {
        /// The socket.
        path: PathBuf,
        /// The step.
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The injection policy (hook path, allowed mount roots) is misconfigured.
    #[error("injection policy: {0}")]
    Policy(#[from] graft_record::InvalidRecord),
    /// The claim records or status files cannot be read or written.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// A call to the API server failed.
    #[error("kubernetes API: {0}")]
    Api(#[from] kube::Error),
    /// A file the driver needs cannot be read or written (`what`: the step, e.g. `read`).
    #[error("{what} {path}: {source}")]
    Io {
        /// The step.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl DriverError {
    /// A [`DriverError::Io`] for `what` on `path`.
    pub fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        DriverError::Io {
            what,
            path: path.into(),
            source,
        }
    }

    /// Whether the device config (devices.toml) is what is wrong: unreadable, not TOML of
    /// its schema, an entry or a glob refused.
    pub fn is_device_config(&self) -> bool {
        matches!(
            self,
            DriverError::Config { .. }
                | DriverError::ConfigRead { .. }
                | DriverError::ConfigParse { .. }
                | DriverError::ConfigEntry { .. }
                | DriverError::ConfigGlob { .. }
        )
    }
}

/// Why a family could not be opened or started. Here, beside [`DriverError`], so that the
/// Events about a failed start (`events`) read it without importing the families' port.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A family's discovery could not be made (its config is unreadable or invalid).
    #[error(transparent)]
    Discovery(#[from] DriverError),
    /// A step of the family's start failed (the message is the step, as the log's chain
    /// shows it above its cause).
    #[error("{what}")]
    Step {
        /// The family whose start failed.
        family: &'static str,
        /// The step.
        what: &'static str,
        /// Its cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl BackendError {
    /// `family`'s step `what` failed with `source`.
    pub fn step(
        family: &'static str,
        what: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        BackendError::Step {
            family,
            what,
            source: source.into(),
        }
    }
}
