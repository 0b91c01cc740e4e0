//! Answers made outside ttrpc: how an [`Intercept`] is called and how its answers reach the
//! trunk between the connection's own messages.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::sync::mpsc;

use super::messages::{frame_payloads, Boundary};
use super::{frame, lock};

/// The whole reply message (header included) an [`Intercept`] answers with.
pub type Answer = Pin<Box<dyn Future<Output = Vec<u8>> + Send>>;

/// Answers some requests of a connection itself, on the trunk's reader task, instead of
/// letting them cross to the connection's ttrpc server.
pub trait Intercept: Send + Sync + 'static {
    /// `message` is one whole ttrpc message (header included). `None` passes it on.
    fn intercept(&self, message: &[u8]) -> Option<Answer>;
}

/// A connection's outgoing side: answers wait here while a message is half written.
#[derive(Default)]
pub(super) struct Outgoing {
    boundary: Boundary,
    held: Vec<Vec<u8>>,
}

impl Outgoing {
    /// The connection's writer sent `data` as a frame: once its message is whole, the
    /// answers held meanwhile follow it.
    pub(super) fn wrote(&mut self, data: &[u8], frames: &mpsc::UnboundedSender<Vec<u8>>) {
        self.boundary.feed(data);
        if self.boundary.between() {
            for f in self.held.drain(..) {
                // A closed trunk ends the session; the answer has nowhere to go.
                let _ = frames.send(f);
            }
        }
    }
}

/// Polls `answer` once here, on the reader's task, and sends it if it is ready; an answer
/// that has to wait finishes on a task of its own.
pub(super) fn answer_on(
    id: u32,
    mut answer: Answer,
    frames: mpsc::UnboundedSender<Vec<u8>>,
    out: Arc<Mutex<Outgoing>>,
) {
    // A no-op waker for the first poll: whatever the answer waits on registers the task's
    // waker again when the task polls it.
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    match answer.as_mut().poll(&mut cx) {
        Poll::Ready(message) => send_answer(id, &message, &frames, &out),
        Poll::Pending => {
            // The answer is bounded by the handler's deadline; a panic is logged.
            crate::guard::spawn_logged("NRI intercepted answer", async move {
                let message = answer.await;
                send_answer(id, &message, &frames, &out);
            });
        }
    }
}

/// Sends a whole message now if the connection's writer is between messages, else holds it
/// until its current message is whole.
fn send_answer(
    id: u32,
    message: &[u8],
    frames: &mpsc::UnboundedSender<Vec<u8>>,
    out: &Mutex<Outgoing>,
) {
    let mut out = lock(out);
    for payload in frame_payloads(message) {
        let f = frame(id, payload);
        if out.boundary.between() {
            // A closed trunk ends the session; the answer has nowhere to go.
            let _ = frames.send(f);
        } else {
            out.held.push(f);
        }
    }
}
