//! Synchronize answered before it is decoded: which requests are, what the plugin then
//! sees, and how a failure after the answer ends the connection.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use graft_proto::nri_ttrpc::RuntimeClient;
use proptest::prelude::*;
use ttrpc::r#async::{transport::Socket, Client};

use super::tests::{decode, request, wire};
use super::*;
use crate::event_mask::EventMask;
use crate::plugin::Runtime;
use crate::Event;

/// Sends what its `synchronize` receives; fails when `fails`; promises no updates unless
/// `updates`.
struct Recorder {
    seen: tokio::sync::mpsc::UnboundedSender<Vec<String>>,
    fails: bool,
    updates: bool,
}

#[async_trait]
impl NriPlugin for Recorder {
    fn events(&self) -> EventMask {
        EventMask::of(&[Event::CREATE_CONTAINER])
    }

    fn synchronize_updates(&self) -> bool {
        self.updates
    }

    async fn synchronize(
        &self,
        _runtime: Runtime,
        pods: Vec<nri::PodSandbox>,
        _containers: Vec<nri::Container>,
    ) -> ttrpc::Result<Vec<nri::ContainerUpdate>> {
        let _ = self.seen.send(pods.into_iter().map(|p| p.id).collect());
        if self.fails {
            return Err(TtrpcError::Others("cannot read the records".into()));
        }
        Ok(Vec::new())
    }
}

type Seen = tokio::sync::mpsc::UnboundedReceiver<Vec<String>>;

fn setup(fails: bool, updates: bool) -> (Inline<Recorder>, Arc<Dispatcher<Recorder>>, Seen) {
    let (ours, _theirs) = tokio::net::UnixStream::pair().unwrap();
    let client = RuntimeClient::new(Client::new(Socket::new(ours)));
    let (synced, _) = tokio::sync::watch::channel(false);
    let (tx, seen) = tokio::sync::mpsc::unbounded_channel();
    let plugin = Recorder {
        seen: tx,
        fails,
        updates,
    };
    let d = Arc::new(Dispatcher::new(
        Arc::new(plugin),
        Duration::from_secs(1),
        client,
        synced,
    ));
    (Inline::new(d.clone(), true, true), d, seen)
}

fn chunk(pods: &[&str], more: bool) -> Vec<u8> {
    nri::SynchronizeRequest {
        pods: pods
            .iter()
            .map(|id| nri::PodSandbox {
                id: (*id).into(),
                ..Default::default()
            })
            .collect(),
        more,
        ..Default::default()
    }
    .write_to_bytes()
    .unwrap()
}

/// The intercept's answer to a Synchronize chunk, decoded.
async fn answer(i: &Inline<Recorder>, payload: Vec<u8>) -> nri::SynchronizeResponse {
    let m = wire(&request("Synchronize", payload), 5, MESSAGE_TYPE_REQUEST, 0);
    let taken = i.intercept(&m).expect("Synchronize is taken");
    let (stream, response) = decode(&taken.await);
    assert_eq!((stream, response.status.code()), (5, Code::OK));
    nri::SynchronizeResponse::parse_from_bytes(&response.payload).unwrap()
}

#[tokio::test]
async fn synchronize_is_answered_before_the_plugin_sees_it_when_it_promises_no_updates() {
    let (i, _d, mut seen) = setup(false, false);
    let first = answer(&i, chunk(&["p1"], true)).await;
    assert!(first.more && first.update.is_empty());
    let last = answer(&i, chunk(&["p2", "p3"], false)).await;
    assert!(!last.more && last.update.is_empty());
    // The handler runs after the answer, with every chunk in order.
    let pods = tokio::time::timeout(Duration::from_secs(5), seen.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(pods, ["p1", "p2", "p3"]);
}

#[tokio::test]
async fn a_plugin_that_may_return_updates_is_synchronized_through_ttrpc() {
    let (i, _d, _seen) = setup(false, true);
    let m = wire(
        &request("Synchronize", chunk(&["p1"], false)),
        5,
        MESSAGE_TYPE_REQUEST,
        0,
    );
    assert!(i.intercept(&m).is_none());
}

#[tokio::test]
async fn a_synchronize_that_fails_after_its_answer_ends_the_connection() {
    // Nested garbage: the top level scans, so it is answered; decoding it then fails.
    let (i, d, _seen) = setup(false, false);
    let mut bad = vec![0x0a, 0x03, 0xff, 0xff, 0xff];
    bad.extend(chunk(&[], false));
    assert_eq!(more_flag(&bad), Some(false));
    answer(&i, bad).await;
    let reason = tokio::time::timeout(Duration::from_secs(5), d.failed())
        .await
        .unwrap();
    assert!(reason.contains("does not decode"), "{reason}");

    // The handler's own error.
    let (i, d, mut seen) = setup(true, false);
    answer(&i, chunk(&["p1"], false)).await;
    assert_eq!(seen.recv().await.unwrap(), ["p1"]);
    let reason = tokio::time::timeout(Duration::from_secs(5), d.failed())
        .await
        .unwrap();
    assert!(reason.contains("cannot read the records"), "{reason}");
}

#[test]
fn a_top_level_that_does_not_scan_is_left_to_ttrpc() {
    for (what, bytes) in [
        ("a length past the end", vec![0x0a, 0x10, 0x00]),
        ("a tag cut short", vec![0x80]),
        ("wire type 7", vec![0x0f]),
        ("a bool cut short", vec![0x18, 0x80]),
    ] {
        assert_eq!(more_flag(&bytes), None, "{what}");
    }
}

fn arb_request() -> impl Strategy<Value = nri::SynchronizeRequest> {
    (
        proptest::collection::vec("[a-z0-9]{0,12}", 0..6),
        proptest::collection::vec("[a-z0-9]{0,12}", 0..6),
        any::<bool>(),
    )
        .prop_map(|(pods, ctrs, more)| nri::SynchronizeRequest {
            pods: pods
                .into_iter()
                .map(|id| nri::PodSandbox {
                    id,
                    ..Default::default()
                })
                .collect(),
            containers: ctrs
                .into_iter()
                .map(|id| nri::Container {
                    id,
                    ..Default::default()
                })
                .collect(),
            more,
            ..Default::default()
        })
}

proptest! {
    /// Requests, and concatenations of them (which the decoder merges, the last `more`
    /// winning), read the same `more` as the decoder reads.
    #[test]
    fn more_flag_reads_what_the_decoder_reads(parts in proptest::collection::vec(arb_request(), 1..4)) {
        let bytes: Vec<u8> = parts.iter().flat_map(|p| p.write_to_bytes().unwrap()).collect();
        let decoded = nri::SynchronizeRequest::parse_from_bytes(&bytes).unwrap();
        prop_assert_eq!(more_flag(&bytes), Some(decoded.more));
    }

    /// Whatever the bytes, a `more` that scans is the decoder's whenever the decoder
    /// accepts them.
    #[test]
    fn more_flag_never_disagrees_with_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let (Some(more), Ok(decoded)) =
            (more_flag(&bytes), nri::SynchronizeRequest::parse_from_bytes(&bytes))
        {
            prop_assert_eq!(more, decoded.more);
        }
    }
}
