//! The kubelet plugin endpoints: the DRA service socket, then the registration socket that
//! tells the kubelet where it is.

pub mod authority;
pub mod dra;
pub mod registration;
pub mod resource_health;
pub mod resource_health_v1;
pub mod socket;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use graft_proto::dra::{v1, v1beta1};
use graft_proto::dra_health::v1::dra_resource_health_server::DraResourceHealthServer as V1HealthServer;
use graft_proto::dra_health::v1alpha1::dra_resource_health_server::DraResourceHealthServer;
use graft_proto::pluginregistration::registration_server::RegistrationServer;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::StreamExt;

use authority::AuthorityFix;

use crate::edge::Edge;
use crate::error::{DriverError, Result};
use registration::{RegistrationService, RegistrationState};
use socket::BoundSocket;

/// Where the kubelet looks.
pub struct PluginPaths {
    /// The registration socket, in the kubelet's plugin registry.
    pub registration: PathBuf,
    /// The DRA service's socket.
    pub dra: PathBuf,
}

impl PluginPaths {
    /// The paths for `driver` under `kubelet_dir`; with `pod_uid`, each pod's own (so that a
    /// rolling update's two pods do not share one).
    pub fn new(kubelet_dir: &Path, driver: &str, pod_uid: Option<&str>) -> Result<Self> {
        Ok(PluginPaths {
            registration: socket::registration_socket(
                &kubelet_dir.join("plugins_registry"),
                driver,
                pod_uid,
            )?,
            dra: socket::dra_socket(&kubelet_dir.join("plugins").join(driver), pod_uid)?,
        })
    }
}

/// Accepted connections, with the kubelet's socket-path `:authority` made acceptable.
fn fixed(
    listener: tokio::net::UnixListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<AuthorityFix<tokio::net::UnixStream>>> {
    UnixListenerStream::new(listener).map(|r| r.map(AuthorityFix::new))
}

/// Serves both endpoints until `shutdown` resolves, then unlinks the registration socket
/// first (the kubelet deregisters) and the DRA socket last. With `health`, the DRA socket
/// also answers the kubelet's resource health stream.
pub async fn serve(
    edge: Arc<Edge>,
    paths: &PluginPaths,
    state: Arc<Mutex<RegistrationState>>,
    health: Option<resource_health::HealthFeed>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let dra_path =
        std::path::absolute(&paths.dra).map_err(|e| DriverError::io("resolve", &paths.dra, e))?;
    let mut dra_sock = BoundSocket::bind(&dra_path)?;
    let dra_listener = dra_sock
        .listener
        .take()
        .ok_or_else(|| DriverError::Socket {
            path: dra_path.clone(),
            reason: "listener already taken".into(),
        })?;

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    // The DRA server is up before the kubelet can learn about it.
    let dra_service = dra::DraService::new(Arc::clone(&edge));
    let dra_beta = dra::DraService::new(Arc::clone(&edge));
    // The kubelet opens the health stream on its own when its feature gate is on; without
    // the service each try fails with Unimplemented, which it logs and retries every 5 s.
    let health_service = health.clone().map(|feed| {
        DraResourceHealthServer::new(resource_health::HealthService::new(feed, stop_rx.clone()))
    });
    let health_v1 = health.map(|feed| {
        V1HealthServer::new(resource_health_v1::HealthServiceV1(
            resource_health::HealthService::new(feed, stop_rx.clone()),
        ))
    });
    let dra_server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(v1::dra_plugin_server::DraPluginServer::new(dra_service))
            .add_service(v1beta1::dra_plugin_server::DraPluginServer::new(dra_beta))
            .add_optional_service(health_service)
            .add_optional_service(health_v1)
            .serve_with_incoming_shutdown(fixed(dra_listener), stopped(stop_rx.clone())),
    );
    tracing::info!(path = %dra_path.display(), "DRA service listening");

    let mut reg_sock = BoundSocket::bind(&paths.registration)?;
    let reg_listener = reg_sock
        .listener
        .take()
        .ok_or_else(|| DriverError::Socket {
            path: paths.registration.clone(),
            reason: "listener already taken".into(),
        })?;
    let reg =
        RegistrationService::new(&edge.core().driver_name, &dra_path.to_string_lossy(), state);
    let reg_server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(reg))
            .serve_with_incoming_shutdown(fixed(reg_listener), stopped(stop_rx.clone())),
    );
    tracing::info!(path = %paths.registration.display(), "registration socket ready");

    shutdown.await;
    tracing::info!("shutting down: removing the plugin sockets");
    reg_sock.unlink();
    let _ = stop_tx.send(true);
    // Graceful stop waits for open connections, and the kubelet keeps its own open.
    let grace = std::time::Duration::from_secs(2);
    let _ = tokio::time::timeout(grace, reg_server).await;
    dra_sock.unlink();
    let _ = tokio::time::timeout(grace, dra_server).await;
    Ok(())
}
