//! A small NRI plugin SDK: implement [`NriPlugin`], hand it to [`run`], and the SDK
//! registers with the runtime, answers Configure with a version-gated event mask, gathers
//! split Synchronize requests, routes both the dedicated event RPCs and StateChange to the
//! plugin, answers everything else with UNIMPLEMENTED, and reconnects when the runtime
//! restarts.
//!
//! Inside: `options` says how to reach the runtime, `session` keeps one connection alive
//! and reconnects, `dispatcher` serves the runtime's requests on a connection.

mod dispatcher;
mod options;
mod session;

use std::time::Duration;

use async_trait::async_trait;
use graft_proto::nri::{self, Event};
use graft_proto::nri_ttrpc::RuntimeClient;
use ttrpc::{Code, Error as TtrpcError};

use crate::events::EventMask;

pub use options::{Options, Transport};
pub use session::{run, SdkError};

/// What the runtime said about itself in Configure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeInfo {
    pub name: String,
    pub version: String,
    pub nri_version: String,
    /// Plugin-specific configuration (pre-installed plugins only).
    pub config: String,
    /// Milliseconds; zero when an old runtime did not say.
    pub request_timeout_ms: i64,
    pub registration_timeout_ms: i64,
}

/// Where the connection to the runtime stands, for plugins that publish it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionState {
    /// Configure answered.
    Configured(RuntimeInfo),
    /// The initial Synchronize answered.
    Synchronized,
    /// Connection lost (or never made), with the reason.
    Disconnected(String),
}

/// A request from the runtime, for [`NriPlugin::answered`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Configure,
    Synchronize,
    CreateContainer,
    /// Every other event, whichever RPC it came through.
    Lifecycle(Event),
}

/// One request answered: which, how long it took, and whether its handler missed the
/// deadline (and was refused for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    pub request: Request,
    pub elapsed: Duration,
    pub deadline_exceeded: bool,
}

/// A handle on the runtime's side of the current connection, for unsolicited updates.
///
/// Never await [`Runtime::update_containers`] inside an event handler: the runtime holds
/// its NRI lock while it waits for the handler, so the call would deadlock until the
/// request timeout. Spawn a task instead.
#[derive(Clone)]
pub struct Runtime {
    client: RuntimeClient,
    timeout: Duration,
}

impl Runtime {
    /// Asks the runtime to update and/or evict containers. Returns the updates it failed.
    pub async fn update_containers(
        &self,
        update: Vec<nri::ContainerUpdate>,
        evict: Vec<nri::ContainerEviction>,
    ) -> ttrpc::Result<Vec<nri::ContainerUpdate>> {
        let req = nri::UpdateContainersRequest {
            update,
            evict,
            ..Default::default()
        };
        let resp = self
            .client
            .update_containers(ctx_with_timeout(self.timeout), &req)
            .await?;
        Ok(resp.failed)
    }
}

/// The plugin's side. Only the events in [`NriPlugin::events`] are delivered. Each
/// CreateContainer and lifecycle handler runs under [`Options::handler_deadline`] (lowered
/// when the runtime's own request timeout is short), and a late or panicking handler is
/// answered with an error instead of a dropped connection. Handlers must not block their
/// thread (run blocking work with `tokio::task::spawn_blocking`), or the deadline cannot
/// fire.
#[async_trait]
pub trait NriPlugin: Send + Sync + 'static {
    /// Events to subscribe to. Never includes VALIDATE_CONTAINER_ADJUSTMENT by accident:
    /// a validator is consulted on every container creation.
    fn events(&self) -> EventMask;

    /// Connection state changes, for status reporting.
    fn connection_state(&self, _state: ConnectionState) {}

    /// Every request answered, for metrics. Called on the request's path: keep it cheap.
    fn answered(&self, _answered: Answered) {}

    /// The runtime's full state after (re)connecting. Returned updates are applied by the
    /// runtime; anything else (evictions) goes through `runtime` from a spawned task.
    async fn synchronize(
        &self,
        _runtime: Runtime,
        _pods: Vec<nri::PodSandbox>,
        _containers: Vec<nri::Container>,
    ) -> ttrpc::Result<Vec<nri::ContainerUpdate>> {
        Ok(Vec::new())
    }

    async fn create_container(
        &self,
        _pod: nri::PodSandbox,
        _container: nri::Container,
    ) -> ttrpc::Result<nri::CreateContainerResponse> {
        Err(unimplemented("CreateContainer"))
    }

    /// Every other subscribed lifecycle event, whether it arrives through its dedicated RPC
    /// or through StateChange.
    async fn lifecycle(
        &self,
        _event: Event,
        _pod: Option<nri::PodSandbox>,
        _container: Option<nri::Container>,
    ) -> ttrpc::Result<()> {
        Ok(())
    }
}

/// The status for a method the plugin does not handle. The runtime (NRI v0.12+) only falls
/// back to StateChange on UNIMPLEMENTED; NOT_FOUND would fail the CRI operation.
pub fn unimplemented(method: &str) -> TtrpcError {
    TtrpcError::RpcStatus(ttrpc::get_status(
        Code::UNIMPLEMENTED,
        format!("{method} is not implemented by this plugin"),
    ))
}

fn ctx_with_timeout(t: Duration) -> ttrpc::context::Context {
    ttrpc::context::with_timeout(t.as_nanos().min(i64::MAX as u128) as i64)
}
