//! The probe client: `<daemon> --probe live|ready` asks the daemon's own Unix socket and
//! exits 0 or 1, so an exec probe needs nothing but the daemon's binary.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use crate::error::ProbeError;

/// How long a probe waits for the whole answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// Answers beyond this are cut (metrics for tests included).
const MAX_RESPONSE: u64 = 4 << 20;

/// `GET path` on the socket: the status code and the body.
pub fn get(socket: &Path, path: &str, timeout: Duration) -> Result<(u16, String), ProbeError> {
    let io = |step: &'static str| {
        move |source| ProbeError::Io {
            step,
            socket: socket.to_path_buf(),
            source,
        }
    };
    let answer = |what: &'static str| ProbeError::Answer {
        what,
        socket: socket.to_path_buf(),
    };
    let mut s = UnixStream::connect(socket).map_err(io("cannot connect to"))?;
    s.set_read_timeout(Some(timeout))
        .map_err(io("cannot set a timeout on"))?;
    s.set_write_timeout(Some(timeout))
        .map_err(io("cannot set a timeout on"))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .map_err(io("cannot send to"))?;
    let mut raw = Vec::new();
    s.take(MAX_RESPONSE)
        .read_to_end(&mut raw)
        .map_err(io("no answer from"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| answer("incomplete answer from"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| answer("not an HTTP answer from"))?;
    Ok((status, body.to_string()))
}

/// What a probe asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    /// `/healthz`: the process is alive.
    Live,
    /// `/readyz`: the daemon is ready.
    Ready,
}

/// Asks and reports: 0 when the daemon answered 200, else 1 with the reason on stderr.
pub fn run(kind: ProbeKind, socket: &Path) -> i32 {
    let path = match kind {
        ProbeKind::Live => "/healthz",
        ProbeKind::Ready => "/readyz",
    };
    match get(socket, path, PROBE_TIMEOUT) {
        Ok((200, body)) => {
            print!("{body}");
            0
        }
        Ok((code, body)) => {
            eprintln!("{path}: {code}: {}", body.trim_end());
            1
        }
        Err(e) => {
            eprintln!("{path}: {e}");
            1
        }
    }
}

/// When the command line asks for a probe (`--probe live|ready`, optionally with
/// `--health-socket PATH`, else `GRAFT_HEALTH_SOCKET`, else `default_socket`), runs it and
/// returns the exit status; `None` otherwise. Checked before the daemon's own arguments,
/// which a probe does not need.
pub fn requested(args: &[String], default_socket: &str) -> Option<Result<i32, ProbeError>> {
    let kind = flag(args, "--probe")?;
    let kind = match kind.as_str() {
        "live" => ProbeKind::Live,
        "ready" => ProbeKind::Ready,
        other => return Some(Err(ProbeError::Kind(other.to_string()))),
    };
    let socket = flag(args, "--health-socket")
        .or_else(|| std::env::var("GRAFT_HEALTH_SOCKET").ok())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| default_socket.to_string());
    Some(Ok(run(kind, &PathBuf::from(socket))))
}

/// `--name value` or `--name=value`.
fn flag(args: &[String], name: &str) -> Option<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == name {
            return Some(it.next().cloned().unwrap_or_default());
        }
        if let Some(v) = a.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
            return Some(v.to_string());
        }
    }
    None
}
