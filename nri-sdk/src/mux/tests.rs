use std::collections::VecDeque;
use std::time::Duration;

use graft_proto::{nri, nri_ttrpc::RuntimeClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use ttrpc::r#async::{transport::Socket, Client};

use super::*;

/// The runtime's reading side: Go's mux conn returns one whole frame per Read and fails
/// with ENOMEM when the caller's buffer is smaller; ttrpc reads through a 4096-byte
/// bufio.Reader, which reads straight into the caller's buffer only when that buffer is
/// at least as large as its own and it holds nothing buffered.
struct GoReader {
    frames: VecDeque<Vec<u8>>,
    buf: Vec<u8>,
    pos: usize,
}

const BUFIO_SIZE: usize = 4096;

impl GoReader {
    fn new(frames: Vec<Vec<u8>>) -> Self {
        GoReader {
            frames: frames.into(),
            buf: Vec::new(),
            pos: 0,
        }
    }

    fn conn_read(&mut self, cap: usize) -> Result<Vec<u8>, String> {
        let f = self.frames.pop_front().ok_or("EOF")?;
        if f.len() > cap {
            return Err(format!(
                "ENOMEM: frame of {} bytes, buffer of {cap}",
                f.len()
            ));
        }
        Ok(f)
    }

    fn read(&mut self, want: usize) -> Result<Vec<u8>, String> {
        if self.pos == self.buf.len() {
            if want >= BUFIO_SIZE {
                return self.conn_read(want);
            }
            self.buf = self.conn_read(BUFIO_SIZE)?;
            self.pos = 0;
        }
        let n = want.min(self.buf.len() - self.pos);
        let out = self.buf[self.pos..self.pos + n].to_vec();
        self.pos += n;
        Ok(out)
    }

    fn read_full(&mut self, n: usize) -> Result<Vec<u8>, String> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let chunk = self.read(n - out.len())?;
            if chunk.is_empty() {
                return Err("empty read".into());
            }
            out.extend(chunk);
        }
        Ok(out)
    }

    /// One ttrpc message: 10-byte header, then the payload. Returns the payload length.
    fn read_message(&mut self) -> Result<usize, String> {
        let h = self.read_full(10)?;
        let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
        self.read_full(len)?;
        Ok(len)
    }
}

/// Reads raw frames for connection `id` from the far end of a trunk.
async fn raw_frames(peer: &mut UnixStream, id: u32, count: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while out.len() < count {
        let mut h = [0u8; HEADER_LEN];
        peer.read_exact(&mut h).await.unwrap();
        let cid = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let len = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
        let mut p = vec![0; len];
        peer.read_exact(&mut p).await.unwrap();
        assert_eq!(cid, id);
        out.push(p);
    }
    out
}

fn evictions(n: usize) -> Vec<nri::ContainerEviction> {
    (0..n)
        .map(|i| nri::ContainerEviction {
            container_id: format!("{i:064}"),
            reason: "x".repeat(100),
            ..Default::default()
        })
        .collect()
}

#[tokio::test]
async fn ttrpc_messages_over_the_mux_fit_the_go_reader() {
    let (ours, mut peer) = UnixStream::pair().unwrap();
    let mux = Mux::new(ours);
    let client = RuntimeClient::new(Client::new(Socket::new(mux.open(RUNTIME_SERVICE_CONN))));
    // Small, just under, just over and far over one bufio buffer, then 1 MiB.
    let sizes = [1, 20, 24, 30, 6000];
    let mut expected = Vec::new();
    for n in sizes {
        let req = nri::UpdateContainersRequest {
            evict: evictions(n),
            ..Default::default()
        };
        expected.push(protobuf::Message::compute_size(&req) as usize);
        let c = client.clone();
        tokio::spawn(async move {
            let _ = c
                .update_containers(ttrpc::context::with_timeout(0), &req)
                .await;
        });
        // Keep messages in order on the wire.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Each message: header + first <= 4086 payload bytes, then at most one more frame.
    let mut frames = Vec::new();
    let mut wire_lens = Vec::new();
    for &inner in &expected {
        let first = raw_frames(&mut peer, RUNTIME_SERVICE_CONN, 1)
            .await
            .remove(0);
        assert!(
            first.len() <= BUFIO_SIZE,
            "first frame of a message is {} bytes",
            first.len()
        );
        let len = u32::from_be_bytes([first[0], first[1], first[2], first[3]]) as usize;
        assert!(
            len > inner,
            "the ttrpc envelope wraps the {inner}-byte request"
        );
        let mut have = first.len();
        frames.push(first);
        while have < len + 10 {
            let next = raw_frames(&mut peer, RUNTIME_SERVICE_CONN, 1)
                .await
                .remove(0);
            have += next.len();
            frames.push(next);
        }
        assert_eq!(have, len + 10, "frames never mix two messages");
        wire_lens.push(len);
    }
    assert!(frames.len() > expected.len(), "large messages were split");
    let mut go = GoReader::new(frames);
    for &len in &wire_lens {
        assert_eq!(go.read_message().unwrap(), len);
    }
}

#[test]
fn the_go_reader_model_rejects_coalesced_or_oversized_frames() {
    // A whole 5000-byte message in one frame.
    let mut msg = (4990u32).to_be_bytes().to_vec();
    msg.extend([0u8; 6]);
    msg.extend(vec![0u8; 4990]);
    assert!(GoReader::new(vec![msg.clone()])
        .read_message()
        .unwrap_err()
        .contains("ENOMEM"));
    // The same split Go-style reads fine.
    let (a, b) = msg.split_at(4096);
    assert_eq!(
        GoReader::new(vec![a.to_vec(), b.to_vec()])
            .read_message()
            .unwrap(),
        4990
    );
    // Two small messages coalesced into a frame larger than the buffer.
    let mut small = (3000u32).to_be_bytes().to_vec();
    small.extend([0u8; 6]);
    small.extend(vec![0u8; 3000]);
    let both = [small.clone(), small].concat();
    assert!(GoReader::new(vec![both])
        .read_message()
        .unwrap_err()
        .contains("ENOMEM"));
}

#[tokio::test]
async fn one_frame_per_write() {
    let (ours, mut peer) = UnixStream::pair().unwrap();
    let mux = Mux::new(ours);
    let mut conn = mux.open(PLUGIN_SERVICE_CONN);
    conn.write_all(b"0123456789").await.unwrap();
    conn.write_all(&[7u8; 5000]).await.unwrap();
    let frames = raw_frames(&mut peer, PLUGIN_SERVICE_CONN, 2).await;
    assert_eq!(frames[0], b"0123456789");
    assert_eq!(frames[1].len(), 5000);
}

pub(super) async fn send_frame(peer: &mut UnixStream, id: u32, payload: &[u8]) {
    let mut f = id.to_be_bytes().to_vec();
    f.extend((payload.len() as u32).to_be_bytes());
    f.extend(payload);
    peer.write_all(&f).await.unwrap();
}

#[tokio::test]
async fn reassembles_streams_and_ignores_unknown_connections() {
    let (ours, mut peer) = UnixStream::pair().unwrap();
    let mux = Mux::new(ours);
    let mut c1 = mux.open(PLUGIN_SERVICE_CONN);
    let mut c2 = mux.open(RUNTIME_SERVICE_CONN);
    send_frame(&mut peer, 9, b"nobody listens").await;
    send_frame(&mut peer, 1, b"hello ").await;
    send_frame(&mut peer, 2, b"other").await;
    send_frame(&mut peer, 1, b"world").await;
    let big = vec![3u8; MAX_PAYLOAD];
    send_frame(&mut peer, 1, &big).await;
    let mut got = vec![0u8; 11];
    c1.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"hello world");
    let mut got = vec![0u8; MAX_PAYLOAD];
    c1.read_exact(&mut got).await.unwrap();
    assert_eq!(got, big);
    let mut got = vec![0u8; 5];
    c2.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"other");
}

#[tokio::test]
async fn an_oversized_frame_closes_the_trunk() {
    let (ours, mut peer) = UnixStream::pair().unwrap();
    let mux = Mux::new(ours);
    let mut c1 = mux.open(PLUGIN_SERVICE_CONN);
    let mut h = 1u32.to_be_bytes().to_vec();
    h.extend(((MAX_PAYLOAD + 1) as u32).to_be_bytes());
    peer.write_all(&h).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), mux.closed())
        .await
        .unwrap();
    assert!(reason.contains("exceeds"), "{reason}");
    let mut buf = [0u8; 1];
    assert_eq!(
        c1.read(&mut buf).await.unwrap(),
        0,
        "logical streams end with the trunk"
    );
}

#[tokio::test]
async fn peer_close_is_reported() {
    let (ours, peer) = UnixStream::pair().unwrap();
    let mux = Mux::new(ours);
    let _c = mux.open(PLUGIN_SERVICE_CONN);
    drop(peer);
    let reason = tokio::time::timeout(Duration::from_secs(5), mux.closed())
        .await
        .unwrap();
    assert!(reason.contains("closed"), "{reason}");
}

#[tokio::test]
async fn a_task_that_panics_closes_the_trunk() {
    let (tx, mut rx) = watch::channel(None);
    let tx = Arc::new(tx);
    let task = tokio::spawn({
        let tx = tx.clone();
        async move {
            let _ended = EndsTrunk::new(tx, "reader");
            panic!("bug in the reader");
        }
    });
    assert!(task.await.unwrap_err().is_panic());
    rx.changed().await.unwrap();
    let reason = rx.borrow().clone().unwrap();
    assert_eq!(reason, "multiplexer reader task panicked");
    // A reason given first stays.
    EndsTrunk::new(tx.clone(), "writer").close("peer gone".into());
    assert_eq!(
        rx.borrow().as_deref(),
        Some("multiplexer reader task panicked")
    );
}
