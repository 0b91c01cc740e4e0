//! Errors of the record contract. Each names the file or field that was wrong.

use std::path::PathBuf;

/// A record field that breaks the contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidRecord {
    pub field: String,
    pub reason: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("record {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error(
        "record {path} has unknown version {version} (this build reads versions up to {supported})"
    )]
    UnknownVersion {
        path: PathBuf,
        version: u64,
        supported: u32,
    },
    #[error("record {path} of claim {claim} is invalid: {source}")]
    Invalid {
        path: PathBuf,
        /// `namespace/name (uid)` as the record gives it.
        claim: String,
        #[source]
        source: InvalidRecord,
    },
    #[error("claim record for {claim} would be invalid: {source}")]
    Rejected {
        claim: String,
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

pub type Result<T, E = RecordError> = std::result::Result<T, E>;
