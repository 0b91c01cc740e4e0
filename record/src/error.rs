//! Errors of the record contract. Each names the file or field that was wrong.

use std::path::PathBuf;

/// A record field that breaks the contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidRecord {
    /// The field, as a path into the record (`devices[0](gpu-0).edits.mounts[1]`).
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Reading or writing graft's state files.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A file-system call failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`open`, `rename`, `fsync`).
        op: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A file that cannot be read as what it should be.
    #[error("record {path} is corrupt: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A record of a version this build does not read.
    #[error(
        "record {path} has unknown version {version} (this build reads versions up to {supported})"
    )]
    UnknownVersion {
        /// The record's path.
        path: PathBuf,
        /// The version it says it is.
        version: u64,
        /// The newest version this build reads.
        supported: u32,
    },
    /// A record that breaks the contract.
    #[error("record {path} of claim {claim} is invalid: {source}")]
    Invalid {
        /// The record's path.
        path: PathBuf,
        /// `namespace/name (uid)` as the record gives it.
        claim: String,
        /// What breaks it.
        #[source]
        source: InvalidRecord,
    },
    /// The state directory's disk failed a write-back check: no claim is recorded on it
    /// until a later check succeeds (see `durability`).
    #[error("the disk of graft's state directory {dir} failed its last write-back check ({reason}); no claim is recorded there until a check succeeds")]
    DiskFailed {
        /// The state directory.
        dir: PathBuf,
        /// The failed check's error.
        reason: String,
    },
    /// A record that would break the contract was not written.
    #[error("claim record for {claim} would be invalid: {source}")]
    Rejected {
        /// The claim, `namespace/name (uid)`.
        claim: String,
        /// What would break it.
        #[source]
        source: InvalidRecord,
    },
}

impl RecordError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        RecordError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

/// The record crate's result: [`RecordError`] unless told otherwise.
pub type Result<T, E = RecordError> = std::result::Result<T, E>;
