//! What can go wrong serving the endpoints, asking them, or reading a probe's flags.

use std::path::PathBuf;

/// Serving the endpoints: the metrics address or the health socket.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The metrics address is not one `parse_addr` accepts.
    #[error("metrics address {addr:?}: {source} (expected host:port, :port, or empty to disable)")]
    Address {
        /// The address as given (trimmed).
        addr: String,
        /// Why it does not parse.
        #[source]
        source: std::net::AddrParseError,
    },
    /// A step of making the health socket failed.
    #[error("health socket {}: {step}: {source}", path.display())]
    SocketIo {
        /// The socket's path.
        path: PathBuf,
        /// What was being done.
        step: &'static str,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The socket's path is taken.
    #[error("health socket {}: {why}", path.display())]
    SocketTaken {
        /// The socket's path.
        path: PathBuf,
        /// By what.
        why: &'static str,
    },
}

/// The probe client's request to a daemon's socket.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// A step of the request failed (`cannot connect to`, `no answer from`, ...).
    #[error("{step} {}: {source}", socket.display())]
    Io {
        /// What was being done.
        step: &'static str,
        /// The daemon's socket.
        socket: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// The answer is not an HTTP response (`incomplete answer from`, ...).
    #[error("{what} {}", socket.display())]
    Answer {
        /// What is wrong with it.
        what: &'static str,
        /// The daemon's socket.
        socket: PathBuf,
    },
    /// `--probe` names neither `live` nor `ready`.
    #[error("--probe {0:?}: expected live or ready")]
    Kind(String),
}

/// Why a daemon is not ready, one line: the `/readyz` body with status 503.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotReady(pub String);

impl From<String> for NotReady {
    fn from(why: String) -> Self {
        NotReady(why)
    }
}

impl From<&str> for NotReady {
    fn from(why: &str) -> Self {
        NotReady(why.to_string())
    }
}
