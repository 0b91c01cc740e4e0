//! Intercepted connections: whole messages to the intercept however the frames cut them,
//! everything else to the connection byte for byte, answers never inside a message.

use std::time::Duration;

use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{mpsc as tmpsc, oneshot};

use super::messages::{frame_payloads, Boundary, Incoming, Piece};
use super::tests::send_frame;
use super::*;

/// A ttrpc-shaped message whose payload starts with `tag`.
fn message(tag: &[u8], len: usize, stream: u32) -> Vec<u8> {
    let mut payload = tag.to_vec();
    payload.resize(len.max(tag.len()), b'.');
    let mut m = (payload.len() as u32).to_be_bytes().to_vec();
    m.extend(stream.to_be_bytes());
    m.extend([1, 0]);
    m.extend(payload);
    m
}

/// Takes messages whose payload starts with "take", answering each with "answer" and its
/// stream id; "wait" messages are answered once the test releases them.
struct Taker {
    seen: tmpsc::UnboundedSender<Vec<u8>>,
    release: Mutex<Option<oneshot::Receiver<()>>>,
}

impl Intercept for Taker {
    fn intercept(&self, m: &[u8]) -> Option<Answer> {
        let payload = &m[10..];
        let stream = u32::from_be_bytes([m[4], m[5], m[6], m[7]]);
        let _ = self.seen.send(m.to_vec());
        if payload.starts_with(b"take") {
            return Some(Box::pin(async move { message(b"answer", 6, stream) }));
        }
        if payload.starts_with(b"wait") {
            let release = self.release.lock().unwrap().take()?;
            return Some(Box::pin(async move {
                let _ = release.await;
                message(b"late", 4, stream)
            }));
        }
        None
    }
}

fn taker() -> (
    Arc<Taker>,
    tmpsc::UnboundedReceiver<Vec<u8>>,
    oneshot::Sender<()>,
) {
    let (seen, rx) = tmpsc::unbounded_channel();
    let (release_tx, release) = oneshot::channel();
    let t = Taker {
        seen,
        release: Mutex::new(Some(release)),
    };
    (Arc::new(t), rx, release_tx)
}

async fn read_frame(peer: &mut UnixStream) -> (u32, Vec<u8>) {
    let mut h = [0u8; HEADER_LEN];
    peer.read_exact(&mut h).await.unwrap();
    let id = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    let mut p = vec![0; u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize];
    peer.read_exact(&mut p).await.unwrap();
    (id, p)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// However the frames cut the stream, each message comes out whole and in order.
    #[test]
    fn incoming_cuts_whole_messages(
        lens in prop::collection::vec(0usize..9000, 1..8),
        cuts in prop::collection::vec(1usize..7000, 1..40),
    ) {
        let msgs: Vec<Vec<u8>> = lens.iter().enumerate()
            .map(|(i, &l)| message(format!("m{i}").as_bytes(), l, 1)).collect();
        let stream = msgs.concat();
        let mut inc = Incoming::default();
        let mut out = Vec::new();
        let (mut at, mut cut) = (0, 0);
        while at < stream.len() {
            let n = cuts[cut % cuts.len()].min(stream.len() - at);
            inc.push(stream[at..at + n].to_vec(), &mut out);
            at += n;
            cut += 1;
        }
        let want: Vec<Piece> = msgs.into_iter().map(Piece::Message).collect();
        prop_assert_eq!(out, want);
    }

    /// The boundary follows any cut of the writes and is between messages exactly at their ends.
    #[test]
    fn boundary_is_between_messages_only_at_their_ends(
        lens in prop::collection::vec(0usize..9000, 1..6),
        cuts in prop::collection::vec(1usize..5000, 1..30),
    ) {
        let msgs: Vec<Vec<u8>> = lens.iter().map(|&l| message(b"", l, 1)).collect();
        let mut ends = std::collections::BTreeSet::new();
        let mut total = 0;
        for m in &msgs { total += m.len(); ends.insert(total); }
        let stream = msgs.concat();
        let mut b = Boundary::default();
        let (mut at, mut cut) = (0, 0);
        while at < stream.len() {
            let n = cuts[cut % cuts.len()].min(stream.len() - at);
            b.feed(&stream[at..at + n]);
            at += n;
            cut += 1;
            prop_assert_eq!(b.between(), ends.contains(&at), "at byte {}", at);
        }
    }
}

#[test]
fn a_message_too_large_for_ttrpc_passes_through_unheld() {
    let len = ttrpc::proto::MESSAGE_LENGTH_MAX + 1;
    let mut head = (len as u32).to_be_bytes().to_vec();
    head.extend([0, 0, 0, 1, 1, 0]);
    let mut inc = Incoming::default();
    let mut out = Vec::new();
    let first = [head.clone(), vec![0; 100]].concat();
    inc.push(first.clone(), &mut out);
    assert_eq!(out, vec![Piece::Bytes(first)]);
    out.clear();
    // The rest of its body, then a small message in the same frame.
    let small = message(b"x", 3, 3);
    inc.push([vec![0; len - 100], small.clone()].concat(), &mut out);
    assert_eq!(
        out,
        vec![Piece::Bytes(vec![0; len - 100]), Piece::Message(small)]
    );
}

#[test]
fn answers_go_out_in_frames_the_runtime_can_read() {
    let small = message(b"a", 100, 1);
    assert_eq!(frame_payloads(&small).collect::<Vec<_>>(), vec![&small[..]]);
    let big = message(b"a", 9000, 1);
    let frames: Vec<&[u8]> = frame_payloads(&big).collect();
    assert_eq!(frames.len(), 2);
    assert_eq!(frames[0].len(), 4096);
    assert_eq!(frames.concat(), big);
}

#[tokio::test]
async fn intercepted_messages_are_answered_and_the_rest_reach_the_connection() {
    let (ours, mut peer) = UnixStream::pair().unwrap();
    let mux = Mux::new(ours);
    let (t, mut seen, _release) = taker();
    let mut conn = mux.open_intercepted(PLUGIN_SERVICE_CONN, t);
    let pass = message(b"pass", 5000, 5);
    // A taken message, then one passed on split as the runtime splits it.
    send_frame(&mut peer, PLUGIN_SERVICE_CONN, &message(b"take", 8, 3)).await;
    for p in frame_payloads(&pass) {
        send_frame(&mut peer, PLUGIN_SERVICE_CONN, p).await;
    }
    let (id, answer) = read_frame(&mut peer).await;
    assert_eq!(id, PLUGIN_SERVICE_CONN);
    assert_eq!(answer, message(b"answer", 6, 3));
    let mut got = vec![0u8; pass.len()];
    conn.read_exact(&mut got).await.unwrap();
    assert_eq!(got, pass, "a message not taken reaches ttrpc byte for byte");
    assert_eq!(seen.recv().await.unwrap(), message(b"take", 8, 3));
    assert_eq!(seen.recv().await.unwrap(), pass);
}

#[tokio::test]
async fn an_answer_waits_for_the_message_being_written() {
    let (ours, mut peer) = UnixStream::pair().unwrap();
    let mux = Mux::new(ours);
    let (t, mut seen, _release) = taker();
    let mut conn = mux.open_intercepted(PLUGIN_SERVICE_CONN, t);
    // ttrpc has written the first frame of a large message...
    let big = message(b"reply", 9000, 7);
    conn.write_all(&big[..4096]).await.unwrap();
    // ...when the intercept answers a request.
    send_frame(&mut peer, PLUGIN_SERVICE_CONN, &message(b"take", 4, 9)).await;
    seen.recv().await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    conn.write_all(&big[4096..]).await.unwrap();
    let frames = [
        read_frame(&mut peer).await.1,
        read_frame(&mut peer).await.1,
        read_frame(&mut peer).await.1,
    ];
    assert_eq!(
        frames[..2].concat(),
        big,
        "the message's frames stay together"
    );
    assert_eq!(frames[2], message(b"answer", 6, 9));
}

#[tokio::test]
async fn an_answer_that_waits_finishes_on_its_own_task() {
    let (ours, mut peer) = UnixStream::pair().unwrap();
    let mux = Mux::new(ours);
    let (t, mut seen, release) = taker();
    let _conn = mux.open_intercepted(PLUGIN_SERVICE_CONN, t);
    send_frame(&mut peer, PLUGIN_SERVICE_CONN, &message(b"wait", 4, 11)).await;
    seen.recv().await.unwrap();
    // The reader is free meanwhile: a later request is answered first.
    send_frame(&mut peer, PLUGIN_SERVICE_CONN, &message(b"take", 4, 13)).await;
    assert_eq!(read_frame(&mut peer).await.1, message(b"answer", 6, 13));
    release.send(()).unwrap();
    assert_eq!(read_frame(&mut peer).await.1, message(b"late", 4, 11));
}

#[tokio::test]
async fn dropping_the_mux_frees_an_intercept_that_holds_its_other_connection() {
    // As the SDK's does: its dispatcher holds a client of the runtime's connection.
    struct Holds(#[allow(dead_code)] MuxConn);
    impl Intercept for Holds {
        fn intercept(&self, _: &[u8]) -> Option<Answer> {
            None
        }
    }
    let (ours, _peer) = UnixStream::pair().unwrap();
    let mux = Mux::new(ours);
    let held = Arc::new(Holds(mux.open(RUNTIME_SERVICE_CONN)));
    let weak = Arc::downgrade(&held);
    let _conn = mux.open_intercepted(PLUGIN_SERVICE_CONN, held);
    drop(mux);
    assert!(weak.upgrade().is_none(), "freed with the trunk");
}
