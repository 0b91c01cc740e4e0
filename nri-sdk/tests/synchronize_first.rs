//! Synchronize answered before it is decoded, through the whole SDK against the scripted
//! runtime: the plugin sees every chunk after the answer, and a handler that fails after it
//! ends the connection (pre-installed mode: `run` returns), as an error reply would have
//! made the runtime drop it.

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use graft_nri_sdk::{self as sdk, EventMask, NriPlugin, Options, Runtime, Transport};
use graft_proto::nri::{self, Event};

use support::{fake_runtime, pod};

struct Promising {
    seen: tokio::sync::mpsc::UnboundedSender<Vec<String>>,
    fails: bool,
}

#[async_trait]
impl NriPlugin for Promising {
    fn events(&self) -> EventMask {
        EventMask::of(&[Event::CREATE_CONTAINER])
    }

    fn synchronize_updates(&self) -> bool {
        false
    }

    async fn synchronize(
        &self,
        _rt: Runtime,
        pods: Vec<nri::PodSandbox>,
        _containers: Vec<nri::Container>,
    ) -> ttrpc::Result<Vec<nri::ContainerUpdate>> {
        let _ = self.seen.send(pods.into_iter().map(|p| p.id).collect());
        if self.fails {
            return Err(ttrpc::Error::Others("the records are unreadable".into()));
        }
        Ok(Vec::new())
    }
}

#[tokio::test]
async fn split_synchronize_is_answered_first_and_a_failure_after_ends_the_connection() {
    for fails in [false, true] {
        let mut runtime = fake_runtime().await;
        let (tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let plugin = Arc::new(Promising { seen: tx, fails });
        let opts = Options::new(
            "promising",
            "10",
            Transport::PreInstalled(runtime.plugin_fd),
        );
        let sdk_task = tokio::spawn(sdk::run(plugin, opts));
        runtime.registered.recv().await.unwrap();
        let ctx = || ttrpc::context::with_timeout(5_000_000_000);
        runtime.configure_as("v2.2.7").await.unwrap();
        for (id, more) in [("p1", true), ("p2", false)] {
            let answer = runtime
                .client
                .synchronize(
                    ctx(),
                    &nri::SynchronizeRequest {
                        pods: vec![pod(id)],
                        more,
                        ..Default::default()
                    },
                )
                .await
                .unwrap();
            assert_eq!(answer.more, more);
            assert!(answer.update.is_empty());
        }
        let pods = tokio::time::timeout(Duration::from_secs(5), seen.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(pods, ["p1", "p2"]);

        let ended = tokio::time::timeout(Duration::from_millis(500), sdk_task).await;
        if fails {
            let reason = ended.expect("the connection ends").unwrap().unwrap_err();
            assert!(
                reason.to_string().contains("the records are unreadable"),
                "{reason}"
            );
        } else {
            assert!(
                ended.is_err(),
                "a handler that succeeds keeps the connection"
            );
        }
        let _ = runtime.server.shutdown().await;
    }
}
