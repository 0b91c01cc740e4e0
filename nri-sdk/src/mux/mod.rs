//! The NRI trunk multiplexer: several logical byte streams over one socket.
//!
//! Every frame is an 8-byte big-endian header (connection id, payload length) and the
//! payload. Logical connections are not negotiated; both ends simply use the same ids.
//!
//! The runtime's Go reader returns one whole frame per read and fails when the frame does
//! not fit the caller's buffer, which for the start of a ttrpc message is a 4096-byte bufio
//! buffer. ttrpc writes each message as the 10-byte header plus at most 4086 payload bytes,
//! then the rest, so this writer maps each `poll_write` to exactly one frame and never
//! buffers or coalesces. Do not put a `BufWriter` in front of a [`MuxConn`].
//!
//! A connection opened with [`Mux::open_intercepted`] is cut into whole ttrpc messages
//! (`messages`): each is offered to its [`Intercept`] on the reader's task before ttrpc
//! sees it, and the intercept's answers go out between ttrpc's messages.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use messages::{Incoming, Piece};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Logical connection on which the runtime calls the plugin's `Plugin` service.
pub const PLUGIN_SERVICE_CONN: u32 = 1;
/// Logical connection on which the plugin calls the runtime's `Runtime` service.
pub const RUNTIME_SERVICE_CONN: u32 = 2;
/// Largest frame payload either side sends or accepts.
pub const MAX_PAYLOAD: usize = 4 * 1024 * 1024 + 10;
/// Frame header length.
pub const HEADER_LEN: usize = 8;

mod intercept;
mod messages;

use intercept::{answer_on, Outgoing};
pub use intercept::{Answer, Intercept};

/// One open connection.
struct Route {
    /// Which open this is, so that a stale connection's drop leaves a newer one alone.
    generation: u64,
    /// Where its incoming bytes go.
    tx: mpsc::UnboundedSender<Vec<u8>>,
    /// Its outgoing side, shared by its writer and its intercept's answers.
    out: Arc<Mutex<Outgoing>>,
    intercept: Option<Arc<dyn Intercept>>,
}

/// Open connections by id.
type Routes = Arc<Mutex<HashMap<u32, Route>>>;

/// One frame: header and payload.
fn frame(id: u32, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(HEADER_LEN + payload.len());
    frame.extend_from_slice(&id.to_be_bytes());
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// One multiplexed trunk. Dropping it stops its reader and writer tasks.
pub struct Mux {
    routes: Routes,
    frames: mpsc::UnboundedSender<Vec<u8>>,
    closed: watch::Receiver<Option<String>>,
    tasks: Vec<JoinHandle<()>>,
    generation: std::sync::atomic::AtomicU64,
}

impl Mux {
    /// Starts multiplexing `trunk`.
    pub fn new<S>(trunk: S) -> Mux
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (mut rd, mut wr) = tokio::io::split(trunk);
        let routes: Routes = Arc::new(Mutex::new(HashMap::new()));
        let (closed_tx, closed) = watch::channel(None);
        let closed_tx = Arc::new(closed_tx);
        let (frames, mut frame_rx) = mpsc::unbounded_channel::<Vec<u8>>();

        let reader = {
            let routes = routes.clone();
            let closed_tx = closed_tx.clone();
            let frames = frames.clone();
            tokio::spawn(async move {
                let ended = EndsTrunk::new(closed_tx, "reader");
                let reason = read_frames(&mut rd, &routes, &frames).await;
                // Ending every logical stream makes ttrpc see EOF on both connections.
                close_routes(&routes);
                ended.close(reason);
            })
        };
        let writer = tokio::spawn(async move {
            let ended = EndsTrunk::new(closed_tx, "writer");
            let mut reason = "all connections closed".to_string();
            while let Some(frame) = frame_rx.recv().await {
                if let Err(e) = wr.write_all(&frame).await {
                    reason = format!("trunk write failed: {e}");
                    break;
                }
            }
            ended.close(reason);
        });
        Mux {
            routes,
            frames,
            closed,
            tasks: vec![reader, writer],
            generation: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Opens logical connection `id`. Frames for an id that is not open are dropped, so open
    /// a connection before the peer can send on it.
    pub fn open(&self, id: u32) -> MuxConn {
        self.open_with(id, None)
    }

    /// Opens logical connection `id` with `intercept` offered every whole message that
    /// arrives on it.
    pub fn open_intercepted(&self, id: u32, intercept: Arc<dyn Intercept>) -> MuxConn {
        self.open_with(id, Some(intercept))
    }

    fn open_with(&self, id: u32, intercept: Option<Arc<dyn Intercept>>) -> MuxConn {
        let (tx, rx) = mpsc::unbounded_channel();
        let generation = self
            .generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let out = Arc::new(Mutex::new(Outgoing::default()));
        let route = Route {
            generation,
            tx,
            out: out.clone(),
            intercept,
        };
        lock(&self.routes).insert(id, route);
        MuxConn {
            id,
            generation,
            rx,
            pending: Vec::new(),
            offset: 0,
            frames: self.frames.clone(),
            out,
            routes: self.routes.clone(),
        }
    }

    /// Resolves when the trunk has closed, with the reason.
    pub async fn closed(&self) -> String {
        let mut rx = self.closed.clone();
        loop {
            if let Some(reason) = rx.borrow().clone() {
                return reason;
            }
            if rx.changed().await.is_err() {
                return "multiplexer stopped".into();
            }
        }
    }
}

impl Drop for Mux {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        // An aborted reader does not close the routes; an intercept can hold a client of
        // this trunk's other connection, whose connection holds the routes: a cycle.
        close_routes(&self.routes);
    }
}

/// Held by each of the trunk's tasks: however the task ends, the trunk is closed with a
/// reason, so that [`Mux::closed`] resolves and the session ends. A task that panics
/// would otherwise leave the other one running and the connection silently half dead.
struct EndsTrunk {
    closed: Arc<watch::Sender<Option<String>>>,
    task: &'static str,
}

impl EndsTrunk {
    fn new(closed: Arc<watch::Sender<Option<String>>>, task: &'static str) -> Self {
        EndsTrunk { closed, task }
    }

    /// The task ends for `reason`.
    fn close(self, reason: String) {
        self.closed.send_if_modified(|r| set_once(r, reason));
    }
}

impl Drop for EndsTrunk {
    fn drop(&mut self) {
        // After `close` this changes nothing: the first reason stays.
        let reason = if std::thread::panicking() {
            tracing::error!(
                task = self.task,
                "NRI multiplexer task panicked; closing the connection"
            );
            format!("multiplexer {} task panicked", self.task)
        } else {
            format!("multiplexer {} task stopped", self.task)
        };
        self.closed.send_if_modified(|r| set_once(r, reason));
    }
}

fn set_once(slot: &mut Option<String>, reason: String) -> bool {
    if slot.is_none() {
        *slot = Some(reason);
        true
    } else {
        false
    }
}

/// Closes every connection. The routes are dropped after the lock is released: dropping an
/// intercept can drop a [`MuxConn`], whose drop takes the lock.
fn close_routes(routes: &Routes) {
    let closed = std::mem::take(&mut *lock(routes));
    drop(closed);
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere cannot leave the route table half-updated, so keep using it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reads frames until the trunk ends; returns why it ended.
async fn read_frames<R: AsyncRead + Unpin>(
    rd: &mut R,
    routes: &Routes,
    frames: &mpsc::UnboundedSender<Vec<u8>>,
) -> String {
    let mut header = [0u8; HEADER_LEN];
    // Intercepted connections' streams, cut into messages, by id (and generation).
    let mut incoming: HashMap<u32, (u64, Incoming)> = HashMap::new();
    let mut pieces = Vec::new();
    loop {
        if let Err(e) = rd.read_exact(&mut header).await {
            return if e.kind() == io::ErrorKind::UnexpectedEof {
                "runtime closed the connection".into()
            } else {
                format!("trunk read failed: {e}")
            };
        }
        let id = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
        let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
        if len > MAX_PAYLOAD {
            return format!(
                "frame of {len} bytes on connection {id} exceeds the {MAX_PAYLOAD}-byte limit"
            );
        }
        let mut payload = vec![0u8; len];
        if let Err(e) = rd.read_exact(&mut payload).await {
            return format!("trunk read failed inside a frame: {e}");
        }
        let route = lock(routes).get(&id).map(|r| {
            (
                r.generation,
                r.tx.clone(),
                r.intercept.clone(),
                r.out.clone(),
            )
        });
        let Some((generation, tx, intercept, out)) = route else {
            tracing::trace!(id, len, "dropping frame for a connection that is not open");
            continue;
        };
        let Some(intercept) = intercept else {
            // A receiver that went away just means that connection was dropped.
            let _ = tx.send(payload);
            continue;
        };
        let cut = incoming.entry(id).or_default();
        if cut.0 != generation {
            *cut = (generation, Incoming::default());
        }
        cut.1.push(payload, &mut pieces);
        for piece in pieces.drain(..) {
            let bytes = match piece {
                Piece::Message(m) => match intercept.intercept(&m) {
                    Some(answer) => {
                        answer_on(id, answer, frames.clone(), out.clone());
                        continue;
                    }
                    None => m,
                },
                Piece::Bytes(b) => b,
            };
            let _ = tx.send(bytes);
        }
    }
}

/// One logical connection: a byte stream in each direction.
pub struct MuxConn {
    id: u32,
    generation: u64,
    rx: mpsc::UnboundedReceiver<Vec<u8>>,
    pending: Vec<u8>,
    offset: usize,
    frames: mpsc::UnboundedSender<Vec<u8>>,
    out: Arc<Mutex<Outgoing>>,
    routes: Routes,
}

impl MuxConn {
    /// The logical connection's id.
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl Drop for MuxConn {
    fn drop(&mut self) {
        let mut routes = lock(&self.routes);
        // Only remove our own route, not one re-opened under the same id since.
        if routes
            .get(&self.id)
            .is_some_and(|r| r.generation == self.generation)
        {
            routes.remove(&self.id);
        }
    }
}

impl AsyncRead for MuxConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        while this.offset >= this.pending.len() {
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(frame)) => {
                    this.pending = frame;
                    this.offset = 0;
                }
                // Trunk gone: end of stream.
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        let n = buf.remaining().min(this.pending.len() - this.offset);
        buf.put_slice(&this.pending[this.offset..this.offset + n]);
        this.offset += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for MuxConn {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        // Exactly one frame per write; a write larger than a frame is taken in part and the
        // caller's write_all sends the rest as further frames.
        let n = data.len().min(MAX_PAYLOAD);
        let mut out = lock(&self.out);
        if self.frames.send(frame(self.id, &data[..n])).is_err() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "NRI trunk is closed",
            )));
        }
        out.wrote(&data[..n], &self.frames);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod intercept_tests;
#[cfg(test)]
mod tests;
