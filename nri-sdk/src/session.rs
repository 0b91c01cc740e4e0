//! The connection's life: dial (or adopt the runtime's fd), multiplex, register, serve until
//! the connection ends, and reconnect with backoff in external mode.

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use graft_proto::nri;
use graft_proto::nri_ttrpc::{self, RuntimeClient};
use ttrpc::r#async::transport::Socket;
use ttrpc::r#async::{Client, Server};

use crate::dispatcher::Dispatcher;
use crate::inline::Inline;
use crate::mux::{Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use crate::options::{Options, OptionsError, Transport};
use crate::plugin::{ctx_with_timeout, ConnectionState, NriPlugin};
use crate::scripted::serve_once;

/// Runs the plugin until the process is stopped (external mode) or the runtime goes away
/// (pre-installed mode). The connection's tasks are owned here: when one ends, the
/// connection is over and is made again (external mode) or `run` returns (pre-installed).
pub async fn run<P: NriPlugin>(plugin: Arc<P>, opts: Options) -> Result<(), SdkError> {
    opts.validate()?;
    let mut backoff = opts.backoff_initial;
    let mut fd = match opts.transport {
        Transport::PreInstalled(fd) => Some(fd),
        Transport::External(_) => None,
    };
    loop {
        let outcome = match (&opts.transport, fd.take()) {
            (Transport::External(path), _) => match tokio::net::UnixStream::connect(path).await {
                Ok(stream) => serve_connection(plugin.clone(), &opts, stream).await,
                Err(source) => Err(ConnectionError::Connect {
                    path: path.clone(),
                    source,
                }),
            },
            (Transport::PreInstalled(_), Some(fd)) => match stream_from_fd(fd) {
                Ok(stream) => serve_connection(plugin.clone(), &opts, stream).await,
                Err(source) => Err(ConnectionError::Adopt { fd, source }),
            },
            (Transport::PreInstalled(_), None) => {
                return Err(SdkError::Closed("runtime connection ended".into()))
            }
        };
        let (reason, was_synchronized) = match outcome {
            Ok(Session {
                reason,
                synchronized,
            }) => (reason, synchronized),
            Err(e) => (e.to_string(), false),
        };
        plugin.connection_state(ConnectionState::Disconnected(reason.clone()));
        if matches!(opts.transport, Transport::PreInstalled(_)) {
            return Err(SdkError::Closed(reason));
        }
        if was_synchronized {
            // A connection that worked resets the backoff: the runtime was just restarted.
            backoff = opts.backoff_initial;
        }
        tracing::warn!(%reason, retry_in_ms = backoff.as_millis() as u64, "NRI connection lost; reconnecting");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(opts.backoff_max);
    }
}

/// Why [`run`] returned.
#[derive(Debug, thiserror::Error)]
pub enum SdkError {
    /// The options are ones the runtime would refuse.
    #[error("invalid plugin options: {0}")]
    Config(#[from] OptionsError),
    /// The runtime's connection ended (pre-installed mode), with the reason.
    #[error("NRI connection closed: {0}")]
    Closed(String),
}

/// Why a connection to the runtime could not be made or registered. The SDK reports it
/// through [`ConnectionState::Disconnected`] and tries again (external mode).
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// The runtime's NRI socket could not be dialled.
    #[error("cannot connect to {}: {source}{}", path.display(), nri_hint(source))]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The socket the runtime passed (`NRI_PLUGIN_SOCKET`) could not be used.
    #[error("socket fd {fd} from NRI_PLUGIN_SOCKET: {source}")]
    Adopt {
        /// The file descriptor.
        fd: i32,
        /// Why.
        source: std::io::Error,
    },
    /// The plugin's ttrpc service would not start.
    #[error("cannot start plugin service: {0}")]
    Serve(#[source] ttrpc::Error),
    /// The runtime refused registration.
    #[error("RegisterPlugin failed: {0}")]
    Register(#[source] ttrpc::Error),
    /// The runtime did not answer registration in time.
    #[error("RegisterPlugin not answered within {0:?}")]
    RegisterTimeout(Duration),
}

fn stream_from_fd(fd: i32) -> std::io::Result<tokio::net::UnixStream> {
    if fd < 0 {
        return Err(std::io::Error::other("negative fd"));
    }
    // SAFETY: the runtime passed this fd to us for exclusive use; nothing else owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let std_stream = std::os::unix::net::UnixStream::from(owned);
    std_stream.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(std_stream)
}

struct Session {
    reason: String,
    synchronized: bool,
}

/// One connection: mux, serve connection 1, register on connection 2, wait for the end.
async fn serve_connection<P, S>(
    plugin: Arc<P>,
    opts: &Options,
    trunk: S,
) -> Result<Session, ConnectionError>
where
    P: NriPlugin,
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let mux = Mux::new(trunk);
    let runtime_conn = mux.open(RUNTIME_SERVICE_CONN);
    let runtime_client = RuntimeClient::new(Client::new(Socket::new(runtime_conn)));

    let (synced_tx, synced_rx) = tokio::sync::watch::channel(false);
    let dispatcher = Arc::new(Dispatcher::new(
        plugin,
        opts.handler_deadline,
        runtime_client.clone(),
        synced_tx,
    ));
    // Serve before registering: Configure arrives as soon as RegisterPlugin succeeds.
    let inline = Inline::new(
        dispatcher.clone(),
        opts.inline_create_container,
        opts.inline_synchronize,
    );
    let plugin_conn = if inline.takes_any() {
        mux.open_intercepted(PLUGIN_SERVICE_CONN, Arc::new(inline))
    } else {
        mux.open(PLUGIN_SERVICE_CONN)
    };
    let listener = serve_once(plugin_conn);
    let mut server = Server::new()
        .register_service(nri_ttrpc::create_plugin(dispatcher.clone()))
        .add_listener(listener);
    server.start().await.map_err(ConnectionError::Serve)?;

    let req = nri::RegisterPluginRequest {
        plugin_name: opts.name.clone(),
        plugin_idx: opts.index.clone(),
        ..Default::default()
    };
    let registered = tokio::time::timeout(
        opts.registration_timeout,
        runtime_client.register_plugin(ctx_with_timeout(opts.registration_timeout), &req),
    )
    .await;
    let result = match registered {
        Ok(Ok(_)) => {
            tracing::info!(name = %opts.name, index = %opts.index, "registered with the runtime");
            // A request answered before it was handled and then failed ends it too, and
            // does not count as a connection that worked (the backoff keeps growing).
            let (reason, failed) = tokio::select! {
                reason = mux.closed() => (reason, false),
                reason = dispatcher.failed() => (reason, true),
            };
            Ok(Session {
                reason,
                synchronized: *synced_rx.borrow() && !failed,
            })
        }
        Ok(Err(e)) => Err(ConnectionError::Register(e)),
        Err(_) => Err(ConnectionError::RegisterTimeout(opts.registration_timeout)),
    };
    let _ = server.shutdown().await;
    result
}

/// What to check when the runtime's socket is not there or not listening: NRI is off
/// (containerd before 2.0 ships it off), or listens elsewhere.
fn nri_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            " (is NRI enabled in the container runtime? containerd: \
             [plugins.\"io.containerd.nri.v1.nri\"] disable = false, off by default before \
             containerd 2.0, and its socket_path must be this path)"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_socket_asks_whether_nri_is_on() {
        let e = ConnectionError::Connect {
            path: "/var/run/nri/nri.sock".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        let text = e.to_string();
        assert!(
            text.contains("is NRI enabled") && text.contains("/var/run/nri/nri.sock"),
            "{text}"
        );
        let e = ConnectionError::Connect {
            path: "/x".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        assert!(!e.to_string().contains("NRI enabled"));
    }
}
