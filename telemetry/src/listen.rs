//! The two listeners: a TCP address for scrapers, bound in the background whenever it
//! becomes free, and a Unix socket for the container's own probes.

use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{watch, Semaphore};

use crate::error::TelemetryError;
use crate::http::{serve_connection, Endpoints};

/// Connections served at once per listener; more are closed at once.
const MAX_CONNECTIONS: usize = 16;

/// Where to serve.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// TCP address for scrapers; `None`: none.
    pub tcp: Option<SocketAddr>,
    /// Unix socket for probes; `None`: none.
    pub unix: Option<PathBuf>,
    /// How often a TCP address held by another process is tried again.
    pub retry: Duration,
}

/// What is being served; dropping it does not stop the server.
pub struct Serving {
    /// The TCP address once bound (with the actual port when 0 was asked for).
    pub tcp: watch::Receiver<Option<SocketAddr>>,
}

/// `""` or `off` (disabled), `:9477` (every IPv4 address), `127.0.0.1:9477`, `[::1]:9477`,
/// and `fd00::1:9477` (an IPv6 address without brackets, as the chart's `$(POD_IP):9477`
/// gives on an IPv6 node: the port is always the part after the last colon).
pub fn parse_addr(s: &str) -> Result<Option<SocketAddr>, TelemetryError> {
    let s = s.trim();
    if s.is_empty() || s == "off" {
        return Ok(None);
    }
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_string()
    };
    full.parse()
        .or_else(|e| {
            let Some((ip, port)) = full.rsplit_once(':') else {
                return Err(e);
            };
            match (ip.parse::<std::net::Ipv6Addr>(), port.parse::<u16>()) {
                (Ok(ip), Ok(port)) => Ok(SocketAddr::from((ip, port))),
                _ => Err(e),
            }
        })
        .map(Some)
        .map_err(|source: std::net::AddrParseError| TelemetryError::Address {
            addr: s.to_string(),
            source,
        })
}

/// How the daemons serve: on `tcp` (retried every 2 s while another instance holds it) and
/// on the probe socket (an empty path: none). A socket that cannot be bound is logged, not
/// fatal: the daemon's real work goes on, and the probes say what is wrong.
pub fn serve_or_log(endpoints: Endpoints, tcp: Option<SocketAddr>, socket: &Path) {
    let config = ServeConfig {
        tcp,
        unix: (!socket.as_os_str().is_empty()).then(|| socket.to_path_buf()),
        retry: Duration::from_secs(2),
    };
    if let Err(e) = serve(endpoints, config) {
        tracing::error!(error = %e, "the health socket is not served; probes will fail");
    }
}

/// Binds the TCP address in the background and the Unix socket now (an error is returned,
/// after the TCP address is under way: the probes depend on the socket), and serves both on the current tokio runtime.
pub fn serve(endpoints: Endpoints, config: ServeConfig) -> Result<Serving, TelemetryError> {
    let (tx, rx) = watch::channel(None);
    if let Some(addr) = config.tcp {
        tokio::spawn(bind_tcp_then_serve(
            addr,
            config.retry,
            endpoints.clone(),
            tx,
        ));
    }
    if let Some(path) = &config.unix {
        let listener = bind_unix(path)?;
        tracing::info!(path = %path.display(), "health socket listening");
        tokio::spawn(accept_unix(listener, endpoints));
    }
    Ok(Serving { tcp: rx })
}

fn bind_unix(path: &Path) -> Result<UnixListener, TelemetryError> {
    let err = |step: &'static str| {
        move |source| TelemetryError::SocketIo {
            path: path.to_path_buf(),
            step,
            source,
        }
    };
    let taken = |why| TelemetryError::SocketTaken {
        path: path.to_path_buf(),
        why,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err("creating its directory"))?;
    }
    // A socket left by this container's previous run (the directory outlives it) is
    // replaced; one that answers belongs to a running instance, and anything else at the
    // path is not ours to remove.
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(taken("another running instance serves it"));
            }
            std::fs::remove_file(path).map_err(err("removing the previous socket"))?
        }
        Ok(_) => return Err(taken("exists and is not a socket")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err("inspecting it")(e)),
    }
    let listener = UnixListener::bind(path).map_err(err("bind"))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err("chmod"))?;
    Ok(listener)
}

async fn accept_unix(listener: UnixListener, endpoints: Endpoints) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => spawn_bounded(&slots, endpoints.clone(), stream),
            Err(e) => accept_failed(e).await,
        }
    }
}

/// Retries until the address is free: during a rolling update the instance being replaced
/// holds it. Says so once, never gives up, never stops the daemon.
async fn bind_tcp_then_serve(
    addr: SocketAddr,
    retry: Duration,
    endpoints: Endpoints,
    bound: watch::Sender<Option<SocketAddr>>,
) {
    let mut told = false;
    let listener = loop {
        match TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(e) => {
                if !told {
                    if e.kind() == std::io::ErrorKind::AddrInUse {
                        tracing::warn!(%addr, "metrics address in use (by the instance being replaced?); binding when it is free");
                    } else {
                        tracing::error!(%addr, error = %e, "cannot bind the metrics address; retrying");
                    }
                    told = true;
                }
                tokio::time::sleep(retry).await;
            }
        }
    };
    let local = listener.local_addr().unwrap_or(addr);
    tracing::info!(addr = %local, "metrics listening");
    bound.send_replace(Some(local));
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                spawn_bounded(&slots, endpoints.clone(), stream)
            }
            Err(e) => accept_failed(e).await,
        }
    }
}

fn spawn_bounded<S>(slots: &Arc<Semaphore>, endpoints: Endpoints, stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // Over the limit the connection is dropped: a scraper retries, a flood is cut short.
    let Ok(permit) = slots.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        serve_connection(endpoints, stream).await;
        drop(permit);
    });
}

/// Out of file descriptors and the like: pause instead of spinning.
async fn accept_failed(e: std::io::Error) {
    tracing::debug!(error = %e, "accept failed");
    tokio::time::sleep(Duration::from_millis(100)).await;
}
