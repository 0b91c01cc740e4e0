//! What graft-driver's start-up needs of the world outside the process, behind small
//! traits so that a unit test replaces them (`tests`: a recording fake): the probe
//! endpoints, the API server (its client and the Node's Events), the device families, the
//! kubelet plugin's serving; and the named [`Point`]s of start-up a test watches it pass.
//! [`Real`] is the world the binary runs in.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use async_trait::async_trait;
use futures::future::BoxFuture;
use graft_driver::backend::{Backend, BackendError, Node};
use graft_driver::edge::Edge;
use graft_driver::events::node as node_events;
use graft_driver::events::Poster;
use graft_driver::families::{Family, Flags};
use graft_driver::plugin::registration::RegistrationState;
use graft_driver::plugin::resource_health::HealthFeed;
use graft_driver::plugin::{self, PluginPaths};
use graft_runtime::Telemetry;
use kube::runtime::events::{Event, Recorder};

/// The metrics and probe endpoints.
pub trait Probes: Send + Sync {
    /// Serves `telemetry` on `tcp` and the probe `socket`, in the background, from now on.
    fn serve_probes(&self, telemetry: Telemetry, tcp: Option<SocketAddr>, socket: &Path);
}

/// The API server.
#[async_trait]
pub trait Cluster: Send + Sync {
    /// A client of it.
    async fn client(&self) -> anyhow::Result<kube::Client>;
    /// Where the Events about `node` go, through `client`.
    fn node_events(&self, client: &kube::Client, node: &str) -> Box<dyn NodeEvents>;
}

/// The Node's Events: posted at once before the process ends, or queued while it runs.
#[async_trait]
pub trait NodeEvents: Send + Sync {
    /// Posts `ev` now, waiting a bounded time (the process is about to end); a failure to
    /// post is logged, never more.
    async fn before_exit(&self, ev: Event);
    /// The poster the running driver queues Events on, and the task that posts them.
    fn poster(self: Box<Self>) -> (Poster, BoxFuture<'static, ()>);
}

/// The device families `--discovery` names.
pub trait Families: Send + Sync {
    /// `family`'s backend, from the node's settings and the families' flags.
    fn open(
        &self,
        family: Family,
        node: &Node,
        flags: &Flags,
    ) -> Result<Box<dyn Backend>, BackendError>;
}

/// The kubelet plugin's gRPC endpoints.
#[async_trait]
pub trait Kubelet: Send + Sync {
    /// Serves the DRA and registration sockets at `paths` until `stop` resolves.
    async fn serve_plugin(
        &self,
        edge: Arc<Edge>,
        paths: &PluginPaths,
        registration: Arc<Mutex<RegistrationState>>,
        health: HealthFeed,
        stop: BoxFuture<'static, ()>,
    ) -> graft_driver::Result<()>;
}

/// A point of start-up that no other seam shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// The claims core made, with graft-nri's injection policy.
    Core,
    /// The checkpoint settled (one of another boot discarded, a corrupt one rebuilt).
    Settled,
    /// A long-running task of graft-driver's own started, by its name.
    Task(&'static str),
}

/// Where a test watches start-up pass its [`Point`]s.
pub trait Watch: Send + Sync {
    /// Called as start-up passes `point`.
    fn at(&self, point: Point);
}

/// Everything start-up needs of the world.
pub trait World: Probes + Cluster + Families + Kubelet + Watch {}

impl<T: Probes + Cluster + Families + Kubelet + Watch> World for T {}

/// The world the binary runs in: the real endpoints, API server, families and kubelet;
/// nobody watches.
pub struct Real;

impl Probes for Real {
    fn serve_probes(&self, telemetry: Telemetry, tcp: Option<SocketAddr>, socket: &Path) {
        telemetry.serve(tcp, Some(socket));
    }
}

#[async_trait]
impl Cluster for Real {
    async fn client(&self) -> anyhow::Result<kube::Client> {
        graft_api::client::connect("graft-driver")
            .await
            .context("no Kubernetes client configuration (in-cluster or KUBECONFIG)")
    }

    fn node_events(&self, client: &kube::Client, node: &str) -> Box<dyn NodeEvents> {
        Box::new(Recorded {
            recorder: graft_driver::events::recorder(client.clone(), node),
            node: node.to_string(),
        })
    }
}

/// The Node's Events through kube's recorder.
struct Recorded {
    recorder: Recorder,
    node: String,
}

#[async_trait]
impl NodeEvents for Recorded {
    async fn before_exit(&self, ev: Event) {
        node_events::post_before_exit(&self.recorder, &self.node, ev).await;
    }

    fn poster(self: Box<Self>) -> (Poster, BoxFuture<'static, ()>) {
        let (poster, posting) = Poster::with_task(self.recorder);
        (poster, Box::pin(posting))
    }
}

impl Families for Real {
    fn open(
        &self,
        family: Family,
        node: &Node,
        flags: &Flags,
    ) -> Result<Box<dyn Backend>, BackendError> {
        family.open(node, flags)
    }
}

#[async_trait]
impl Kubelet for Real {
    async fn serve_plugin(
        &self,
        edge: Arc<Edge>,
        paths: &PluginPaths,
        registration: Arc<Mutex<RegistrationState>>,
        health: HealthFeed,
        stop: BoxFuture<'static, ()>,
    ) -> graft_driver::Result<()> {
        plugin::serve(edge, paths, registration, Some(health), stop).await
    }
}

impl Watch for Real {
    fn at(&self, _point: Point) {}
}
