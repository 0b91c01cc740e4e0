//! A runtime's end of an NRI connection, scripted by the caller: for a plugin's tests and
//! benches, where a real runtime cannot be made to send what the case needs (a split or
//! large Synchronize, an old runtime's Configure, events the plugin did not subscribe to).
//! It answers RegisterPlugin and nothing else of the Runtime service, and calls the
//! plugin's service only when told to, through [`ScriptedRuntime::client`].
//!
//! Where its behaviour comes from: the two logical connections and their ids (the runtime
//! serves Runtime on 2, calls Plugin on 1) and the frame format are containerd/nri's
//! `pkg/net/multiplex` as `mux` models it; RegisterPlugin before anything else, and
//! Configure then Synchronize from the runtime, are NRI's `pkg/api/api.proto` and its
//! README's registration sequence. It is not a runtime: it checks nothing a runtime would
//! check, and UpdateContainers and the other Runtime calls fail with the bindings' default
//! NOT_FOUND ("... is not supported"), so a test of the runtime's own behaviour needs real
//! containerd.

use std::os::fd::{IntoRawFd as _, RawFd};
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt as _;
use graft_proto::nri;
use graft_proto::nri_ttrpc::{self, PluginClient};
use tokio::sync::mpsc;
use ttrpc::r#async::transport::{Listener, Socket};
use ttrpc::r#async::{Client, Server, TtrpcContext};

use crate::mux::{Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};

/// The Runtime service's RegisterPlugin: accepted, and reported as (name, index).
struct Registrar {
    registered: mpsc::UnboundedSender<(String, String)>,
}

#[async_trait]
impl nri_ttrpc::Runtime for Registrar {
    async fn register_plugin(
        &self,
        _ctx: &TtrpcContext,
        req: nri::RegisterPluginRequest,
    ) -> ttrpc::Result<nri::Empty> {
        let _ = self.registered.send((req.plugin_name, req.plugin_idx));
        Ok(nri::Empty::new())
    }
}

/// One end of a socket pair playing the runtime: it serves Runtime on connection 2 and
/// calls Plugin on connection 1. The plugin gets `plugin_fd`, the other end
/// ([`crate::Transport::PreInstalled`]).
pub struct ScriptedRuntime {
    /// The trunk; dropping it closes the connection.
    pub mux: Mux,
    /// The Runtime service's server; shut it down before dropping.
    pub server: Server,
    /// Calls the plugin.
    pub client: PluginClient,
    /// The same connection, for requests sent already encoded (`Client::request`).
    pub raw: Client,
    /// (name, index) of each RegisterPlugin.
    pub registered: mpsc::UnboundedReceiver<(String, String)>,
    /// The plugin's end of the socket pair, for it to own.
    pub plugin_fd: RawFd,
}

impl ScriptedRuntime {
    /// A socket pair with the runtime's end served.
    pub async fn start() -> std::io::Result<Self> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        ours.set_nonblocking(true)?;
        let mux = Mux::new(tokio::net::UnixStream::from_std(ours)?);
        let (tx, registered) = mpsc::unbounded_channel();
        let mut server = Server::new()
            .register_service(nri_ttrpc::create_runtime(Arc::new(Registrar {
                registered: tx,
            })))
            .add_listener(serve_once(mux.open(RUNTIME_SERVICE_CONN)));
        server.start().await.map_err(std::io::Error::other)?;
        let raw = Client::new(Socket::new(mux.open(PLUGIN_SERVICE_CONN)));
        Ok(ScriptedRuntime {
            mux,
            server,
            client: PluginClient::new(raw.clone()),
            raw,
            registered,
            plugin_fd: theirs.into_raw_fd(),
        })
    }
}

impl ScriptedRuntime {
    /// Configures the plugin as containerd `version` would (request timeouts left to the
    /// plugin's defaults), within 10 s.
    pub async fn configure_as(&self, version: &str) -> ttrpc::Result<nri::ConfigureResponse> {
        let req = nri::ConfigureRequest {
            runtime_name: "containerd".into(),
            runtime_version: version.into(),
            ..Default::default()
        };
        let ctx = ttrpc::context::with_timeout(10_000_000_000);
        self.client.configure(ctx, &req).await
    }
}

/// A listener that yields one connection and then stays open: ttrpc's shutdown expects its
/// accept loop to still be running.
pub(crate) fn serve_once<C>(conn: C) -> Listener
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Sync + 'static,
{
    Listener::new(
        futures::stream::once(async move { Ok::<_, std::io::Error>(conn) })
            .chain(futures::stream::pending()),
    )
}
