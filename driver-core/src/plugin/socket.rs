//! Socket paths and listeners for the kubelet plugin endpoints.
//!
//! AF_UNIX paths are limited to 108 bytes including the NUL. With a rolling update each
//! instance gets its own names, derived from its pod UID; when the plain form is too long
//! a short hash of the UID (and then of driver and UID) takes its place.

use std::path::{Path, PathBuf};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use sha2::{Digest, Sha256};
use tokio::net::UnixListener;

use crate::error::{DriverError, Result};

/// Longest path that fits `sockaddr_un.sun_path` with its terminating NUL.
pub const MAX_SOCKET_PATH: usize = 107;

/// The first `len` characters of the input's SHA-256 in unpadded base64url.
fn short_hash(input: &str, len: usize) -> String {
    let mut out = URL_SAFE_NO_PAD.encode(Sha256::digest(input.as_bytes()));
    out.truncate(len);
    out
}

fn first_fitting(dir: &Path, candidates: Vec<String>) -> Result<PathBuf> {
    let mut last = PathBuf::new();
    for c in candidates {
        let p = dir.join(&c);
        if p.as_os_str().len() <= MAX_SOCKET_PATH {
            return Ok(p);
        }
        last = p;
    }
    Err(DriverError::Socket {
        path: last,
        reason: format!(
            "no socket name fits the {MAX_SOCKET_PATH}-byte limit; use a shorter kubelet directory"
        ),
    })
}

/// `<registry>/<driver>-reg.sock`, or per instance `<driver>-<uid>-reg.sock`.
pub fn registration_socket(
    registry_dir: &Path,
    driver: &str,
    pod_uid: Option<&str>,
) -> Result<PathBuf> {
    let candidates = match pod_uid {
        None => vec![format!("{driver}-reg.sock")],
        Some(uid) => vec![
            format!("{driver}-{uid}-reg.sock"),
            format!("{driver}-{}-reg.sock", short_hash(uid, 8)),
            format!(
                "dra-{}-reg.sock",
                short_hash(&format!("{driver}\0{uid}"), 16)
            ),
        ],
    };
    first_fitting(registry_dir, candidates)
}

/// `<plugins>/<driver>/dra.sock`, or per instance `dra-<uid>.sock`.
pub fn dra_socket(plugin_dir: &Path, pod_uid: Option<&str>) -> Result<PathBuf> {
    let candidates = match pod_uid {
        None => vec!["dra.sock".to_string()],
        Some(uid) => vec![
            format!("dra-{uid}.sock"),
            format!("dra-{}.sock", short_hash(uid, 8)),
        ],
    };
    first_fitting(plugin_dir, candidates)
}

/// A listening socket whose file is unlinked when it is dropped.
pub struct BoundSocket {
    /// The socket file.
    pub path: PathBuf,
    /// The listener, until the server takes it.
    pub listener: Option<UnixListener>,
}

impl BoundSocket {
    /// Removes a stale file left by a previous run, then binds.
    pub fn bind(path: &Path) -> Result<Self> {
        let err = |what: &'static str| {
            move |source| DriverError::SocketIo {
                path: path.to_path_buf(),
                what,
                source,
            }
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(err("create directory"))?;
        }
        match std::fs::remove_file(path) {
            Ok(()) => tracing::info!(path = %path.display(), "removed stale socket"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(err("remove stale socket")(e)),
        }
        let listener = UnixListener::bind(path).map_err(err("bind"))?;
        // Root only: whoever can connect can prepare claims. The daemon's umask (077) already
        // closes the window between bind and this.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(err("chmod 0600"))?;
        Ok(BoundSocket {
            path: path.to_path_buf(),
            listener: Some(listener),
        })
    }

    /// Unlinks the socket file now (the kubelet sees the plugin go away).
    pub fn unlink(&self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot remove socket");
            }
        }
    }
}

impl Drop for BoundSocket {
    fn drop(&mut self) {
        self.unlink();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_the_limit() {
        let uid = "0f2c7a3e-1b4d-4c8e-9a6f-1234567890ab";
        let short = registration_socket(
            Path::new("/var/lib/kubelet/plugins_registry"),
            "graft.dev",
            Some(uid),
        )
        .unwrap();
        assert!(short.ends_with(format!("graft.dev-{uid}-reg.sock")));
        let long_driver = "a-rather-long-driver-name.devices.example.com";
        let p = registration_socket(
            Path::new("/var/lib/kubelet/plugins_registry"),
            long_driver,
            Some(uid),
        )
        .unwrap();
        assert!(p.as_os_str().len() <= MAX_SOCKET_PATH, "{}", p.display());
        assert!(p
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(long_driver));
        let deep = PathBuf::from(format!("/{}", "d".repeat(60)));
        let p = registration_socket(&deep, long_driver, Some(uid)).unwrap();
        assert!(p.file_name().unwrap().to_str().unwrap().starts_with("dra-"));
        assert!(
            registration_socket(&PathBuf::from(format!("/{}", "d".repeat(100))), "x", None)
                .is_err()
        );
        let dra = dra_socket(Path::new("/var/lib/kubelet/plugins/graft.dev"), Some(uid)).unwrap();
        assert!(dra.ends_with(format!("dra-{uid}.sock")));
    }

    #[test]
    fn short_hash_is_unpadded_base64url_of_sha256() {
        // Pinned: names already on nodes must not change.
        let uid = "0f2c7a3e-1b4d-4c8e-9a6f-1234567890ab";
        assert_eq!(short_hash(uid, 8), "37ebBP7s");
        assert_eq!(
            short_hash(&format!("graft.dev\0{uid}"), 16),
            "MZP-9STWoCny7xiE"
        );
    }

    #[tokio::test]
    async fn stale_file_is_replaced_and_unlinked_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.sock");
        std::fs::write(&p, b"stale").unwrap();
        let s = BoundSocket::bind(&p).unwrap();
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::symlink_metadata(&p)
            .unwrap()
            .file_type()
            .is_socket());
        drop(s);
        assert!(!p.exists());
    }
}
