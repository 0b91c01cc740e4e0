//! The Plugin service for one connection: Configure, Synchronize, CreateContainer, and one
//! generic path for every lifecycle event, whichever RPC it arrives through.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use graft_proto::nri::{self, Event};
use graft_proto::nri_ttrpc::{self, RuntimeClient};
use ttrpc::r#async::TtrpcContext;
use ttrpc::{Code, Error as TtrpcError};

use crate::event_mask::{valid_events, EventMask};
use crate::guard::{effective_deadline, guarded};
use crate::plugin::{
    unimplemented, Answered, ConnectionState, NriPlugin, Request, Runtime, RuntimeInfo,
};

mod sync;

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

/// A lifecycle request: what it says about the pod and, for container events, the container.
trait LifecycleRequest {
    fn into_parts(self) -> (Option<nri::PodSandbox>, Option<nri::Container>);
}

macro_rules! lifecycle_requests {
    (pod: $($pod:ident),*; container: $($ctr:ident),* $(,)?) => {
        $(impl LifecycleRequest for nri::$pod {
            fn into_parts(self) -> (Option<nri::PodSandbox>, Option<nri::Container>) {
                (self.pod.into_option(), None)
            }
        })*
        $(impl LifecycleRequest for nri::$ctr {
            fn into_parts(self) -> (Option<nri::PodSandbox>, Option<nri::Container>) {
                (self.pod.into_option(), self.container.into_option())
            }
        })*
    };
}

lifecycle_requests! {
    pod: RunPodSandboxRequest, UpdatePodSandboxRequest, PostUpdatePodSandboxRequest,
        StopPodSandboxRequest, RemovePodSandboxRequest;
    container: PostCreateContainerRequest, StartContainerRequest, PostStartContainerRequest,
        UpdateContainerRequest, PostUpdateContainerRequest, StopContainerRequest,
        RemoveContainerRequest,
}

#[derive(Default)]
struct DispatchState {
    mask: EventMask,
    info: RuntimeInfo,
    /// The handler deadline in force on this connection; zero until Configure.
    deadline: Duration,
    /// Chunks of a split Synchronize gathered so far: decoded (ttrpc) and still encoded
    /// (`inline`).
    pending_pods: Vec<nri::PodSandbox>,
    pending_containers: Vec<nri::Container>,
    pending_raw: Vec<Vec<u8>>,
}

/// Serves the Plugin service for one connection.
pub(crate) struct Dispatcher<P> {
    plugin: Arc<P>,
    wanted_deadline: Duration,
    runtime_client: RuntimeClient,
    state: Mutex<DispatchState>,
    synced: tokio::sync::watch::Sender<bool>,
    /// Why the connection must end, once a request answered already fails.
    failed: tokio::sync::watch::Sender<Option<String>>,
}

impl<P: NriPlugin> Dispatcher<P> {
    /// `synced` turns true once the initial Synchronize is answered.
    pub(crate) fn new(
        plugin: Arc<P>,
        wanted_deadline: Duration,
        runtime_client: RuntimeClient,
        synced: tokio::sync::watch::Sender<bool>,
    ) -> Self {
        Dispatcher {
            plugin,
            wanted_deadline,
            runtime_client,
            state: Mutex::new(DispatchState::default()),
            synced,
            failed: tokio::sync::watch::Sender::new(None),
        }
    }

    /// Ends the connection: what an error reply would have told the runtime, for a request
    /// answered before it was handled.
    fn fail(&self, reason: String) {
        tracing::error!(%reason, "ending the NRI connection");
        self.failed.send_if_modified(|r| {
            let first = r.is_none();
            if first {
                *r = Some(reason);
            }
            first
        });
    }

    /// Resolves with the reason once the connection must end ([`Dispatcher::fail`]).
    pub(crate) async fn failed(&self) -> String {
        let mut rx = self.failed.subscribe();
        loop {
            if let Some(reason) = rx.borrow_and_update().clone() {
                return reason;
            }
            if rx.changed().await.is_err() {
                // Unreachable: `&self` holds the sender.
                std::future::pending::<()>().await;
            }
        }
    }

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

    /// Tells the plugin a request was answered.
    fn answered<T>(&self, request: Request, started: Instant, result: &ttrpc::Result<T>) {
        let deadline_exceeded = matches!(result,
            Err(TtrpcError::RpcStatus(s)) if s.code() == Code::DEADLINE_EXCEEDED);
        self.plugin.answered(Answered {
            request,
            elapsed: started.elapsed(),
            deadline_exceeded,
        });
    }

    /// Every lifecycle event: refused as unimplemented unless subscribed, else handed to the
    /// plugin under the deadline and panic guard.
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
        let started = Instant::now();
        let what = describe(method, pod.as_ref(), ctr.as_ref());
        let result = guarded(&what, self.deadline(), self.plugin.lifecycle(e, pod, ctr)).await;
        self.answered(Request::Lifecycle(e), started, &result);
        result
    }

    /// CreateContainer, whether ttrpc or the inline path (`inline`) received it.
    pub(crate) async fn create(
        &self,
        req: nri::CreateContainerRequest,
    ) -> ttrpc::Result<nri::CreateContainerResponse> {
        if !self.subscribed(Event::CREATE_CONTAINER) {
            return Err(unimplemented("CreateContainer"));
        }
        let started = Instant::now();
        let pod = req.pod.unwrap_or_default();
        let ctr = req.container.unwrap_or_default();
        let what = describe("CreateContainer", Some(&pod), Some(&ctr));
        let result = guarded(
            &what,
            self.deadline(),
            self.plugin.create_container(pod, ctr),
        )
        .await;
        self.answered(Request::CreateContainer, started, &result);
        result
    }

    /// A dedicated lifecycle RPC: its event, answered with the (empty) default response.
    async fn forward<R: LifecycleRequest, T: Default>(
        &self,
        method: &str,
        e: Event,
        req: R,
    ) -> ttrpc::Result<T> {
        let (pod, ctr) = req.into_parts();
        self.event(method, e, pod, ctr).await.map(|()| T::default())
    }
}

/// The Plugin service: each `method(Request) -> Response: "Name", EVENT;` line becomes a
/// forwarder to [`Dispatcher::forward`]; the methods after them are written out.
macro_rules! plugin_service {
    (
        $( $method:ident($req:ident) -> $resp:ident: $name:literal, $event:ident; )*
        { $($rest:tt)* }
    ) => {
        #[async_trait]
        impl<P: NriPlugin> nri_ttrpc::Plugin for Dispatcher<P> {
            $(
                async fn $method(
                    &self,
                    _ctx: &TtrpcContext,
                    req: nri::$req,
                ) -> ttrpc::Result<nri::$resp> {
                    self.forward($name, Event::$event, req).await
                }
            )*
            $($rest)*
        }
    };
}

plugin_service! {
    run_pod_sandbox(RunPodSandboxRequest) -> RunPodSandboxResponse:
        "RunPodSandbox", RUN_POD_SANDBOX;
    update_pod_sandbox(UpdatePodSandboxRequest) -> UpdatePodSandboxResponse:
        "UpdatePodSandbox", UPDATE_POD_SANDBOX;
    post_update_pod_sandbox(PostUpdatePodSandboxRequest) -> PostUpdatePodSandboxResponse:
        "PostUpdatePodSandbox", POST_UPDATE_POD_SANDBOX;
    stop_pod_sandbox(StopPodSandboxRequest) -> StopPodSandboxResponse:
        "StopPodSandbox", STOP_POD_SANDBOX;
    remove_pod_sandbox(RemovePodSandboxRequest) -> RemovePodSandboxResponse:
        "RemovePodSandbox", REMOVE_POD_SANDBOX;
    post_create_container(PostCreateContainerRequest) -> PostCreateContainerResponse:
        "PostCreateContainer", POST_CREATE_CONTAINER;
    start_container(StartContainerRequest) -> StartContainerResponse:
        "StartContainer", START_CONTAINER;
    post_start_container(PostStartContainerRequest) -> PostStartContainerResponse:
        "PostStartContainer", POST_START_CONTAINER;
    update_container(UpdateContainerRequest) -> UpdateContainerResponse:
        "UpdateContainer", UPDATE_CONTAINER;
    post_update_container(PostUpdateContainerRequest) -> PostUpdateContainerResponse:
        "PostUpdateContainer", POST_UPDATE_CONTAINER;
    stop_container(StopContainerRequest) -> StopContainerResponse:
        "StopContainer", STOP_CONTAINER;
    remove_container(RemoveContainerRequest) -> RemoveContainerResponse:
        "RemoveContainer", REMOVE_CONTAINER;
    {
        async fn configure(
            &self,
            _ctx: &TtrpcContext,
            req: nri::ConfigureRequest,
        ) -> ttrpc::Result<nri::ConfigureResponse> {
            let started = Instant::now();
            let valid = valid_events(&req.runtime_name, &req.runtime_version, &req.NRI_version);
            let mask = self.plugin.events().intersect(valid);
            if mask.is_empty() {
                self.plugin.connection_state(ConnectionState::Unsupported(RuntimeInfo {
                    name: req.runtime_name.clone(),
                    version: req.runtime_version.clone(),
                    nri_version: req.NRI_version.clone(),
                    ..Default::default()
                }));
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
            self.answered(Request::Configure, started, &Ok(()));
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
            self.synchronize_now(req).await
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
            self.create(req).await
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
            req: nri::ValidateContainerAdjustmentRequest,
        ) -> ttrpc::Result<nri::ValidateContainerAdjustmentResponse> {
            if !self.subscribed(Event::VALIDATE_CONTAINER_ADJUSTMENT) {
                return Err(unimplemented("ValidateContainerAdjustment"));
            }
            let started = Instant::now();
            let what = describe(
                "ValidateContainerAdjustment",
                req.pod.as_ref(),
                req.container.as_ref(),
            );
            // An error rejects the container as a response would (the runtime fails the
            // create on either), so a late or panicking validator fails closed.
            let result = guarded(
                &what,
                self.deadline(),
                self.plugin.validate_container_adjustment(req),
            )
            .await;
            self.answered(Request::ValidateContainerAdjustment, started, &result);
            result
        }
    }
}
