//! The SDK against a scripted runtime built from the same multiplexer and bindings: the
//! cases real containerd does not produce on demand (split Synchronize, old-runtime mask
//! gating, calls for events the plugin did not subscribe to).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use graft_nri_sdk::{self as sdk, EventMask, NriPlugin, Options, Runtime, Transport};
use graft_proto::nri::{self, Event};
use ttrpc::Code;

use support::{code, fake_runtime, message, pod, Harness};

#[derive(Default)]
struct Seen {
    synced_pods: Vec<String>,
    created: Vec<String>,
}

struct TestPlugin {
    seen: Arc<Mutex<Seen>>,
}

#[async_trait]
impl NriPlugin for TestPlugin {
    fn events(&self) -> EventMask {
        // VALIDATE is beyond what containerd 1.7 knows: the SDK must drop it.
        EventMask::of(&[
            Event::CREATE_CONTAINER,
            Event::STOP_CONTAINER,
            Event::VALIDATE_CONTAINER_ADJUSTMENT,
        ])
    }

    async fn synchronize(
        &self,
        _rt: Runtime,
        pods: Vec<nri::PodSandbox>,
        _containers: Vec<nri::Container>,
    ) -> ttrpc::Result<Vec<nri::ContainerUpdate>> {
        self.seen.lock().unwrap().synced_pods = pods.into_iter().map(|p| p.id).collect();
        Ok(Vec::new())
    }

    async fn create_container(
        &self,
        _pod: nri::PodSandbox,
        ctr: nri::Container,
    ) -> ttrpc::Result<nri::CreateContainerResponse> {
        self.seen.lock().unwrap().created.push(ctr.name.clone());
        let mut adj = nri::ContainerAdjustment::new();
        adj.env.push(nri::KeyValue {
            key: "SEEN".into(),
            value: ctr.name,
            ..Default::default()
        });
        Ok(nri::CreateContainerResponse {
            adjust: Some(adj).into(),
            ..Default::default()
        })
    }
}

#[tokio::test]
async fn handshake_split_sync_events_and_unimplemented() {
    let mut runtime = fake_runtime().await;
    let (plugin_client, fd) = (runtime.client.clone(), runtime.plugin_fd);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let plugin = Arc::new(TestPlugin { seen: seen.clone() });
    let sdk_task = tokio::spawn(sdk::run(
        plugin,
        Options::new("graft-test", "42", Transport::PreInstalled(fd)),
    ));

    let (name, idx) = tokio::time::timeout(Duration::from_secs(5), runtime.registered.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((name.as_str(), idx.as_str()), ("graft-test", "42"));
    let ctx = || ttrpc::context::with_timeout(2_000_000_000);

    let conf = runtime.configure_as("v1.7.24").await.unwrap();
    assert_eq!(
        conf.events,
        0x8 | 0x200,
        "CREATE and STOP only; VALIDATE gated off for 1.7"
    );

    // A split Synchronize: only the last chunk reaches the plugin, with everything.
    let first = plugin_client
        .synchronize(
            ctx(),
            &nri::SynchronizeRequest {
                pods: vec![pod("p1")],
                more: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(first.more && first.update.is_empty());
    assert!(seen.lock().unwrap().synced_pods.is_empty());
    let last = plugin_client
        .synchronize(
            ctx(),
            &nri::SynchronizeRequest {
                pods: vec![pod("p2")],
                more: false,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(!last.more);
    assert_eq!(seen.lock().unwrap().synced_pods, ["p1", "p2"]);

    let created = plugin_client
        .create_container(
            ctx(),
            &nri::CreateContainerRequest {
                pod: Some(pod("p1")).into(),
                container: Some(nri::Container {
                    name: "app".into(),
                    ..Default::default()
                })
                .into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(created.adjust.env[0].value, "app");

    // Subscribed event through its dedicated RPC and through StateChange: both fine.
    plugin_client
        .stop_container(ctx(), &nri::StopContainerRequest::new())
        .await
        .unwrap();
    plugin_client
        .state_change(
            ctx(),
            &nri::StateChangeEvent {
                event: Event::STOP_CONTAINER.into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();

    // Everything else is UNIMPLEMENTED (12), never NOT_FOUND.
    let e = plugin_client
        .run_pod_sandbox(ctx(), &nri::RunPodSandboxRequest::new())
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::UNIMPLEMENTED);
    let e = plugin_client
        .start_container(ctx(), &nri::StartContainerRequest::new())
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::UNIMPLEMENTED);
    let e = plugin_client
        .state_change(
            ctx(),
            &nri::StateChangeEvent {
                event: Event::START_CONTAINER.into(),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::UNIMPLEMENTED);
    let e = plugin_client
        .validate_container_adjustment(ctx(), &nri::ValidateContainerAdjustmentRequest::new())
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::UNIMPLEMENTED);

    // The runtime goes away: a pre-installed plugin ends instead of reconnecting.
    drop(plugin_client);
    let _ = runtime.server.shutdown().await;
    drop(runtime);
    let ended = tokio::time::timeout(Duration::from_secs(5), sdk_task)
        .await
        .unwrap()
        .unwrap();
    assert!(
        ended.is_err(),
        "pre-installed mode ends with the connection"
    );
}

#[tokio::test]
async fn a_mask_the_runtime_cannot_take_is_refused() {
    struct OnlyValidate;
    #[async_trait]
    impl NriPlugin for OnlyValidate {
        fn events(&self) -> EventMask {
            EventMask::of(&[Event::VALIDATE_CONTAINER_ADJUSTMENT])
        }
    }
    let mut runtime = fake_runtime().await;
    tokio::spawn(sdk::run(
        Arc::new(OnlyValidate),
        Options::new("v", "01", Transport::PreInstalled(runtime.plugin_fd)),
    ));
    runtime.registered.recv().await.unwrap();
    let e = runtime.configure_as("v2.1.4").await.unwrap_err();
    assert_eq!(
        code(e),
        Code::FAILED_PRECONDITION,
        "never answer 0, which would mean every event"
    );
    let _ = runtime.server.shutdown().await;
}

#[test]
fn options_are_checked_like_the_runtime_does() {
    let t = || Transport::External("/x".into());
    assert!(Options::new("graft", "10", t()).validate().is_ok());
    assert!(Options::new("graft", "1", t()).validate().is_err());
    assert!(Options::new("graft", "ab", t()).validate().is_err());
    assert!(Options::new("gr aft", "10", t()).validate().is_err());
    assert!(Options::new("", "10", t()).validate().is_err());
}

/// A plugin whose CreateContainer hangs for the first container, panics for the second and
/// answers the third: the first two are refused within the deadline, the connection stays,
/// and the third is answered on it. The runtime said its timeout is 400 ms, so the 1 s
/// deadline asked for is lowered to 200 ms.
#[tokio::test]
async fn late_and_panicking_handlers_are_refused_and_the_plugin_stays_connected() {
    late_and_panicking(true).await
}

/// The same with CreateContainer through ttrpc's tasks: both paths refuse alike.
#[tokio::test]
async fn late_and_panicking_handlers_are_refused_alike_through_ttrpc() {
    late_and_panicking(false).await
}

async fn late_and_panicking(inline: bool) {
    struct Faulty;
    #[async_trait]
    impl NriPlugin for Faulty {
        fn events(&self) -> EventMask {
            EventMask::of(&[Event::CREATE_CONTAINER, Event::STOP_CONTAINER])
        }
        async fn create_container(
            &self,
            _pod: nri::PodSandbox,
            ctr: nri::Container,
        ) -> ttrpc::Result<nri::CreateContainerResponse> {
            match ctr.name.as_str() {
                "hangs" => std::future::pending().await,
                "panics" => panic!("handler bug for {}", ctr.name),
                _ => Ok(nri::CreateContainerResponse::new()),
            }
        }
        async fn lifecycle(
            &self,
            _e: Event,
            _p: Option<nri::PodSandbox>,
            _c: Option<nri::Container>,
        ) -> ttrpc::Result<()> {
            panic!("lifecycle bug")
        }
    }
    let Harness {
        mux: _mux,
        mut server,
        client,
        registered: mut reg_rx,
        plugin_fd,
        ..
    } = fake_runtime().await;
    let mut opts = Options::new("faulty", "10", Transport::PreInstalled(plugin_fd));
    opts.inline_create_container = inline;
    tokio::spawn(sdk::run(Arc::new(Faulty), opts));
    reg_rx.recv().await.unwrap();
    // The runtime's own timeout, generous in the test so that only the plugin's fires.
    let ctx = || ttrpc::context::with_timeout(5_000_000_000);
    client
        .configure(
            ctx(),
            &nri::ConfigureRequest {
                runtime_name: "containerd".into(),
                runtime_version: "v2.2.7".into(),
                request_timeout: 400,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let create = |name: &str| nri::CreateContainerRequest {
        pod: Some(pod("p")).into(),
        container: Some(nri::Container {
            name: name.into(),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let e = client
        .create_container(ctx(), &create("hangs"))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(190) && took < Duration::from_millis(400),
        "refused after {took:?}"
    );
    let msg = message(&e);
    assert_eq!(code(e), Code::DEADLINE_EXCEEDED);
    assert!(
        msg.contains("\"hangs\"") && msg.contains("deadline"),
        "{msg}"
    );

    let e = client
        .create_container(ctx(), &create("panics"))
        .await
        .unwrap_err();
    let msg = message(&e);
    assert_eq!(code(e), Code::INTERNAL);
    assert!(msg.contains("handler bug for panics"), "{msg}");
    let e = client
        .stop_container(ctx(), &nri::StopContainerRequest::new())
        .await
        .unwrap_err();
    assert_eq!(code(e), Code::INTERNAL);

    // Same connection, next container: answered.
    client
        .create_container(ctx(), &create("fine"))
        .await
        .unwrap();
    let _ = server.shutdown().await;
}
