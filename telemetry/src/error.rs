use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("metrics address {addr:?}: {reason}")]
    Address { addr: String, reason: String },
    #[error("health socket {}: {reason}", path.display())]
    Socket { path: PathBuf, reason: String },
}
