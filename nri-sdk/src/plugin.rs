//! The plugin's side of the SDK: the [`NriPlugin`] trait and what the SDK tells it.

use std::time::Duration;

use async_trait::async_trait;
use graft_proto::nri::{self, Event};
use graft_proto::nri_ttrpc::RuntimeClient;
use ttrpc::{Code, Error as TtrpcError};

use crate::event_mask::EventMask;
#[cfg(doc)]
use crate::Options;

/// What the runtime said about itself in Configure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeInfo {
    /// The runtime's name (`containerd`; `v2` from containerd 2.0.0-2.0.3).
    pub name: String,
    /// The runtime's version (`v2.1.4`).
    pub version: String,
    /// The NRI version the runtime speaks; empty before NRI v0.12.
    pub nri_version: String,
    /// Plugin-specific configuration (pre-installed plugins only).
    pub config: String,
    /// How long the runtime waits for a reply, in milliseconds; zero when an old runtime
    /// did not say.
    pub request_timeout_ms: i64,
    /// How long the runtime gives registration (Synchronize included), in milliseconds;
    /// zero when an old runtime did not say.
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
    /// The runtime supports none of the plugin's events (a validator on a runtime before
    /// NRI v0.10): Configure is refused and the runtime drops the connection.
    Unsupported(RuntimeInfo),
}

/// A request from the runtime, for [`NriPlugin::answered`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Configure.
    Configure,
    /// Synchronize (all its chunks, answered once).
    Synchronize,
    /// CreateContainer.
    CreateContainer,
    /// ValidateContainerAdjustment.
    ValidateContainerAdjustment,
    /// Every other event, whichever RPC it came through.
    Lifecycle(Event),
}

/// One request answered: which, how long it took, and whether its handler missed the
/// deadline (and was refused for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    /// Which request.
    pub request: Request,
    /// From the request's arrival to its answer.
    pub elapsed: Duration,
    /// Whether the handler missed its deadline (the request was refused for it).
    pub deadline_exceeded: bool,
}

/// A handle on the runtime's side of the current connection, for unsolicited updates.
///
/// Never await [`Runtime::update_containers`] inside an event handler: the runtime holds
/// its NRI lock while it waits for the handler, so the call would deadlock until the
/// request timeout. Spawn a task instead.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) client: RuntimeClient,
    pub(crate) timeout: Duration,
}

impl Runtime {
    /// A handle on no runtime, whose calls all fail (its peer is gone): for driving a
    /// plugin's handlers outside a connection, in tests and benchmarks. Call it inside a
    /// tokio runtime.
    pub fn unconnected() -> std::io::Result<Runtime> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        drop(theirs);
        ours.set_nonblocking(true)?;
        let stream = tokio::net::UnixStream::from_std(ours)?;
        Ok(Runtime {
            client: RuntimeClient::new(ttrpc::r#async::Client::new(
                ttrpc::r#async::transport::Socket::new(stream),
            )),
            timeout: Duration::from_secs(1),
        })
    }

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

    /// Whether [`NriPlugin::synchronize`] may return updates (it may unless the plugin says
    /// otherwise). A plugin that returns `false` promises it never does: the SDK then
    /// answers the runtime's Synchronize as soon as the request is read, before decoding it,
    /// and runs the handler after the answer (see [`Options::inline_synchronize`]). Such a
    /// handler's error ends the connection, so that the runtime synchronizes again; an
    /// update it returns anyway is logged and dropped.
    ///
    /// [`Options::inline_synchronize`]: crate::Options::inline_synchronize
    fn synchronize_updates(&self) -> bool {
        true
    }

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

    /// A container is about to be created: the returned adjustment is applied to it, an
    /// error refuses it. Subscribe to `CREATE_CONTAINER` to receive it.
    async fn create_container(
        &self,
        _pod: nri::PodSandbox,
        _container: nri::Container,
    ) -> ttrpc::Result<nri::CreateContainerResponse> {
        Err(unimplemented("CreateContainer"))
    }

    /// A container's adjustment, after every plugin made its own (NRI v0.10+, containerd
    /// 2.2+): the response may reject it, and so does an error, so the container is not
    /// created. Subscribe to `VALIDATE_CONTAINER_ADJUSTMENT` to receive it; the runtime
    /// then asks on every container creation.
    async fn validate_container_adjustment(
        &self,
        _req: nri::ValidateContainerAdjustmentRequest,
    ) -> ttrpc::Result<nri::ValidateContainerAdjustmentResponse> {
        Err(unimplemented("ValidateContainerAdjustment"))
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

/// A ttrpc context whose deadline is `t` from now.
pub(crate) fn ctx_with_timeout(t: Duration) -> ttrpc::context::Context {
    ttrpc::context::with_timeout(t.as_nanos().min(i64::MAX as u128) as i64)
}
