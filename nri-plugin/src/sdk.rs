//! A small NRI plugin SDK: implement [`NriPlugin`], hand it to [`run`], and the SDK
//! registers with the runtime, answers Configure with a version-gated event mask, gathers
//! split Synchronize requests, routes both the dedicated event RPCs and StateChange to the
//! plugin, answers everything else with UNIMPLEMENTED, and reconnects when the runtime
//! restarts.

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt as _;
use graft_proto::nri::{self, Event};
use graft_proto::nri_ttrpc::{self, RuntimeClient};
use ttrpc::r#async::transport::{Listener, Socket};
use ttrpc::r#async::{Client, Server, TtrpcContext};
use ttrpc::{Code, Error as TtrpcError};

use crate::events::{valid_events, EventMask};
use crate::guard::{effective_deadline, guarded, DEFAULT_DEADLINE};
use crate::mux::{Mux, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};

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

/// Synchronize may take as long as the runtime allows; this only bounds a hung handler.
const SYNCHRONIZE_DEADLINE: Duration = Duration::from_secs(3600);

/// `CreateContainer of container "app" of pod ns/name`, for errors and logs.
fn describe(method: &str, pod: Option<&nri::PodSandbox>, ctr: Option<&nri::Container>) -> String {
    let mut s = method.to_string();
    if let Some(c) = ctr {
        s.push_str(&format!(" of container {:?}", c.name));
    }
    if let Some(p) = pod {
        s.push_str(&format!(" of pod {}/{}", p.namespace, p.name));
    }
    s
}

fn ctx_with_timeout(t: Duration) -> ttrpc::context::Context {
    ttrpc::context::with_timeout(t.as_nanos().min(i64::MAX as u128) as i64)
}

/// How graft-nri reaches the runtime.
#[derive(Debug, Clone)]
pub enum Transport {
    /// Dial the runtime's NRI socket; reconnect after it restarts.
    External(PathBuf),
    /// The runtime started us and passed the socket as this fd (`NRI_PLUGIN_SOCKET`);
    /// there is no reconnecting, the runtime relaunches pre-installed plugins itself.
    PreInstalled(i32),
}

#[derive(Debug, Clone)]
pub struct Options {
    /// Plugin name (`[A-Za-z0-9_.+-]+`).
    pub name: String,
    /// Two-digit index; plugins run in ascending index order.
    pub index: String,
    pub transport: Transport,
    /// Registration must finish within this (the runtime allows 5 s by default).
    pub registration_timeout: Duration,
    /// Every CreateContainer and lifecycle handler answers within this, else the request
    /// is refused (the runtime's own timeout would drop the plugin instead).
    pub handler_deadline: Duration,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

impl Options {
    pub fn new(name: impl Into<String>, index: impl Into<String>, transport: Transport) -> Self {
        Options {
            name: name.into(),
            index: index.into(),
            transport,
            registration_timeout: Duration::from_secs(5),
            handler_deadline: DEFAULT_DEADLINE,
            backoff_initial: Duration::from_millis(200),
            backoff_max: Duration::from_secs(5),
        }
    }

    /// Checks name and index the way the runtime does, so a mistake is reported here.
    pub fn validate(&self) -> Result<(), String> {
        let name_ok = !self.name.is_empty()
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.+-".contains(&b));
        if !name_ok {
            return Err(format!(
                "plugin name {:?} must match [A-Za-z0-9_.+-]+",
                self.name
            ));
        }
        if self.index.len() != 2 || !self.index.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "plugin index {:?} must be exactly two digits",
                self.index
            ));
        }
        Ok(())
    }
}

/// Runs the plugin until the process is stopped (external mode) or the runtime goes away
/// (pre-installed mode).
pub async fn run<P: NriPlugin>(plugin: Arc<P>, opts: Options) -> Result<(), SdkError> {
    opts.validate().map_err(SdkError::Config)?;
    let mut backoff = opts.backoff_initial;
    let mut fd = match opts.transport {
        Transport::PreInstalled(fd) => Some(fd),
        Transport::External(_) => None,
    };
    loop {
        let outcome = match (&opts.transport, fd.take()) {
            (Transport::External(path), _) => match tokio::net::UnixStream::connect(path).await {
                Ok(stream) => serve_connection(plugin.clone(), &opts, stream).await,
                Err(e) => Err(format!("cannot connect to {}: {e}", path.display())),
            },
            (Transport::PreInstalled(_), Some(fd)) => match stream_from_fd(fd) {
                Ok(stream) => serve_connection(plugin.clone(), &opts, stream).await,
                Err(e) => Err(format!("socket fd {fd} from NRI_PLUGIN_SOCKET: {e}")),
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
            Err(reason) => (reason, false),
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

#[derive(Debug, thiserror::Error)]
pub enum SdkError {
    #[error("invalid plugin options: {0}")]
    Config(String),
    #[error("NRI connection closed: {0}")]
    Closed(String),
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
async fn serve_connection<P, S>(plugin: Arc<P>, opts: &Options, trunk: S) -> Result<Session, String>
where
    P: NriPlugin,
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let mux = Mux::new(trunk);
    // Serve before registering: Configure arrives as soon as RegisterPlugin succeeds.
    let plugin_conn = mux.open(PLUGIN_SERVICE_CONN);
    let runtime_conn = mux.open(RUNTIME_SERVICE_CONN);
    let runtime_client = RuntimeClient::new(Client::new(Socket::new(runtime_conn)));

    let (synced_tx, synced_rx) = tokio::sync::watch::channel(false);
    let dispatcher = Arc::new(Dispatcher {
        plugin: plugin.clone(),
        wanted_deadline: opts.handler_deadline,
        runtime_client: runtime_client.clone(),
        state: Mutex::new(DispatchState::default()),
        synced: synced_tx,
    });
    let listener = Listener::new(
        futures::stream::once(async move { Ok::<_, std::io::Error>(plugin_conn) })
            .chain(futures::stream::pending()),
    );
    let mut server = Server::new()
        .register_service(nri_ttrpc::create_plugin(dispatcher))
        .add_listener(listener);
    server
        .start()
        .await
        .map_err(|e| format!("cannot start plugin service: {e}"))?;

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
            let reason = mux.closed().await;
            Ok(Session {
                reason,
                synchronized: *synced_rx.borrow(),
            })
        }
        Ok(Err(e)) => Err(format!("RegisterPlugin failed: {e}")),
        Err(_) => Err(format!(
            "RegisterPlugin not answered within {:?}",
            opts.registration_timeout
        )),
    };
    let _ = server.shutdown().await;
    result
}

#[derive(Default)]
struct DispatchState {
    mask: EventMask,
    info: RuntimeInfo,
    /// The handler deadline in force on this connection; zero until Configure.
    deadline: Duration,
    /// Chunks of a split Synchronize gathered so far.
    pending_pods: Vec<nri::PodSandbox>,
    pending_containers: Vec<nri::Container>,
}

/// Serves the Plugin service for one connection.
struct Dispatcher<P> {
    plugin: Arc<P>,
    wanted_deadline: Duration,
    runtime_client: RuntimeClient,
    state: Mutex<DispatchState>,
    synced: tokio::sync::watch::Sender<bool>,
}

impl<P: NriPlugin> Dispatcher<P> {
    fn state(&self) -> std::sync::MutexGuard<'_, DispatchState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn subscribed(&self, e: Event) -> bool {
        self.state().mask.contains(e)
    }

    fn deadline(&self) -> Duration {
        let d = self.state().deadline;
        if d.is_zero() {
            self.wanted_deadline
        } else {
            d
        }
    }

    fn runtime(&self) -> Runtime {
        let ms = self.state().info.request_timeout_ms;
        Runtime {
            client: self.runtime_client.clone(),
            timeout: Duration::from_millis(if ms > 0 { ms as u64 } else { 2000 }),
        }
    }

    async fn event(
        &self,
        method: &str,
        e: Event,
        pod: Option<nri::PodSandbox>,
        ctr: Option<nri::Container>,
    ) -> ttrpc::Result<()> {
        if !self.subscribed(e) {
            return Err(unimplemented(method));
        }
        let what = describe(method, pod.as_ref(), ctr.as_ref());
        guarded(&what, self.deadline(), self.plugin.lifecycle(e, pod, ctr)).await
    }
}

#[async_trait]
impl<P: NriPlugin> nri_ttrpc::Plugin for Dispatcher<P> {
    async fn configure(
        &self,
        _ctx: &TtrpcContext,
        req: nri::ConfigureRequest,
    ) -> ttrpc::Result<nri::ConfigureResponse> {
        let valid = valid_events(&req.runtime_name, &req.runtime_version, &req.NRI_version);
        let mask = self.plugin.events().intersect(valid);
        if mask.is_empty() {
            // Zero would subscribe us to everything, validation included.
            return Err(TtrpcError::RpcStatus(ttrpc::get_status(
                Code::FAILED_PRECONDITION,
                format!(
                    "none of the plugin's events ({:#x}) are supported by {} {}",
                    self.plugin.events().0,
                    req.runtime_name,
                    req.runtime_version
                ),
            )));
        }
        let info = RuntimeInfo {
            name: req.runtime_name.clone(),
            version: req.runtime_version.clone(),
            nri_version: req.NRI_version.clone(),
            config: req.config.clone(),
            request_timeout_ms: req.request_timeout,
            registration_timeout_ms: req.registration_timeout,
        };
        tracing::info!(
            runtime = %info.name, version = %info.version, nri = %info.nri_version,
            events = format!("{:#x}", mask.0), "configured by the runtime"
        );
        {
            let mut st = self.state();
            st.mask = mask;
            st.info = info.clone();
            st.deadline = effective_deadline(self.wanted_deadline, req.request_timeout);
        }
        self.plugin
            .connection_state(ConnectionState::Configured(info));
        Ok(nri::ConfigureResponse {
            events: mask.0 as i32,
            ..Default::default()
        })
    }

    async fn synchronize(
        &self,
        _ctx: &TtrpcContext,
        req: nri::SynchronizeRequest,
    ) -> ttrpc::Result<nri::SynchronizeResponse> {
        let (pods, containers) = {
            let mut st = self.state();
            st.pending_pods.extend(req.pods);
            st.pending_containers.extend(req.containers);
            if req.more {
                return Ok(nri::SynchronizeResponse {
                    more: true,
                    ..Default::default()
                });
            }
            (
                std::mem::take(&mut st.pending_pods),
                std::mem::take(&mut st.pending_containers),
            )
        };
        // No deadline below the runtime's: a slow Synchronize only delays readiness. A panic
        // still becomes an error reply rather than a dropped connection.
        let update = guarded(
            "Synchronize",
            SYNCHRONIZE_DEADLINE,
            self.plugin.synchronize(self.runtime(), pods, containers),
        )
        .await?;
        self.synced.send_replace(true);
        self.plugin.connection_state(ConnectionState::Synchronized);
        Ok(nri::SynchronizeResponse {
            update,
            ..Default::default()
        })
    }

    async fn shutdown(&self, _ctx: &TtrpcContext, _: nri::Empty) -> ttrpc::Result<nri::Empty> {
        tracing::info!("runtime announced shutdown");
        Ok(nri::Empty::new())
    }

    async fn create_container(
        &self,
        _ctx: &TtrpcContext,
        req: nri::CreateContainerRequest,
    ) -> ttrpc::Result<nri::CreateContainerResponse> {
        if !self.subscribed(Event::CREATE_CONTAINER) {
            return Err(unimplemented("CreateContainer"));
        }
        let pod = req.pod.unwrap_or_default();
        let ctr = req.container.unwrap_or_default();
        let what = describe("CreateContainer", Some(&pod), Some(&ctr));
        guarded(
            &what,
            self.deadline(),
            self.plugin.create_container(pod, ctr),
        )
        .await
    }

    async fn run_pod_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: nri::RunPodSandboxRequest,
    ) -> ttrpc::Result<nri::RunPodSandboxResponse> {
        self.event(
            "RunPodSandbox",
            Event::RUN_POD_SANDBOX,
            req.pod.into_option(),
            None,
        )
        .await
        .map(|_| Default::default())
    }

    async fn update_pod_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: nri::UpdatePodSandboxRequest,
    ) -> ttrpc::Result<nri::UpdatePodSandboxResponse> {
        self.event(
            "UpdatePodSandbox",
            Event::UPDATE_POD_SANDBOX,
            req.pod.into_option(),
            None,
        )
        .await
        .map(|_| Default::default())
    }

    async fn post_update_pod_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: nri::PostUpdatePodSandboxRequest,
    ) -> ttrpc::Result<nri::PostUpdatePodSandboxResponse> {
        self.event(
            "PostUpdatePodSandbox",
            Event::POST_UPDATE_POD_SANDBOX,
            req.pod.into_option(),
            None,
        )
        .await
        .map(|_| Default::default())
    }

    async fn stop_pod_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: nri::StopPodSandboxRequest,
    ) -> ttrpc::Result<nri::StopPodSandboxResponse> {
        self.event(
            "StopPodSandbox",
            Event::STOP_POD_SANDBOX,
            req.pod.into_option(),
            None,
        )
        .await
        .map(|_| Default::default())
    }

    async fn remove_pod_sandbox(
        &self,
        _ctx: &TtrpcContext,
        req: nri::RemovePodSandboxRequest,
    ) -> ttrpc::Result<nri::RemovePodSandboxResponse> {
        self.event(
            "RemovePodSandbox",
            Event::REMOVE_POD_SANDBOX,
            req.pod.into_option(),
            None,
        )
        .await
        .map(|_| Default::default())
    }

    async fn post_create_container(
        &self,
        _ctx: &TtrpcContext,
        req: nri::PostCreateContainerRequest,
    ) -> ttrpc::Result<nri::PostCreateContainerResponse> {
        self.event(
            "PostCreateContainer",
            Event::POST_CREATE_CONTAINER,
            req.pod.into_option(),
            req.container.into_option(),
        )
        .await
        .map(|_| Default::default())
    }

    async fn start_container(
        &self,
        _ctx: &TtrpcContext,
        req: nri::StartContainerRequest,
    ) -> ttrpc::Result<nri::StartContainerResponse> {
        self.event(
            "StartContainer",
            Event::START_CONTAINER,
            req.pod.into_option(),
            req.container.into_option(),
        )
        .await
        .map(|_| Default::default())
    }

    async fn post_start_container(
        &self,
        _ctx: &TtrpcContext,
        req: nri::PostStartContainerRequest,
    ) -> ttrpc::Result<nri::PostStartContainerResponse> {
        self.event(
            "PostStartContainer",
            Event::POST_START_CONTAINER,
            req.pod.into_option(),
            req.container.into_option(),
        )
        .await
        .map(|_| Default::default())
    }

    async fn update_container(
        &self,
        _ctx: &TtrpcContext,
        req: nri::UpdateContainerRequest,
    ) -> ttrpc::Result<nri::UpdateContainerResponse> {
        self.event(
            "UpdateContainer",
            Event::UPDATE_CONTAINER,
            req.pod.into_option(),
            req.container.into_option(),
        )
        .await
        .map(|_| Default::default())
    }

    async fn post_update_container(
        &self,
        _ctx: &TtrpcContext,
        req: nri::PostUpdateContainerRequest,
    ) -> ttrpc::Result<nri::PostUpdateContainerResponse> {
        self.event(
            "PostUpdateContainer",
            Event::POST_UPDATE_CONTAINER,
            req.pod.into_option(),
            req.container.into_option(),
        )
        .await
        .map(|_| Default::default())
    }

    async fn stop_container(
        &self,
        _ctx: &TtrpcContext,
        req: nri::StopContainerRequest,
    ) -> ttrpc::Result<nri::StopContainerResponse> {
        self.event(
            "StopContainer",
            Event::STOP_CONTAINER,
            req.pod.into_option(),
            req.container.into_option(),
        )
        .await
        .map(|_| Default::default())
    }

    async fn remove_container(
        &self,
        _ctx: &TtrpcContext,
        req: nri::RemoveContainerRequest,
    ) -> ttrpc::Result<nri::RemoveContainerResponse> {
        self.event(
            "RemoveContainer",
            Event::REMOVE_CONTAINER,
            req.pod.into_option(),
            req.container.into_option(),
        )
        .await
        .map(|_| Default::default())
    }

    async fn state_change(
        &self,
        _ctx: &TtrpcContext,
        req: nri::StateChangeEvent,
    ) -> ttrpc::Result<nri::Empty> {
        let event = req.event.enum_value_or(Event::UNKNOWN);
        // CreateContainer always has its own RPC; StateChange never carries it.
        if event == Event::CREATE_CONTAINER {
            return Err(unimplemented("StateChange(CREATE_CONTAINER)"));
        }
        self.event(
            "StateChange",
            event,
            req.pod.into_option(),
            req.container.into_option(),
        )
        .await
        .map(|_| nri::Empty::new())
    }

    async fn validate_container_adjustment(
        &self,
        _ctx: &TtrpcContext,
        _req: nri::ValidateContainerAdjustmentRequest,
    ) -> ttrpc::Result<nri::ValidateContainerAdjustmentResponse> {
        Err(unimplemented("ValidateContainerAdjustment"))
    }
}
