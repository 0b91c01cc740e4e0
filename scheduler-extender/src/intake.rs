//! What one call may cost before it is scored: its body is at most [`MAX_BODY`] and must
//! arrive within [`READ_TIMEOUT`], and the bodies being read at once share a budget of
//! [`BODY_BUDGET`] bytes, taken as their bytes arrive. A socket that sends slowly holds
//! only what it has sent, so slow clients cannot take the memory or the time the
//! scheduler's own calls need; past the budget a call is refused at once (503), which an
//! `ignorable` extender's scheduler treats as "no scores" and goes on.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::{Body, Bytes};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The largest request body read. With `nodeCacheCapable: true` kube-scheduler sends the
/// pod and the candidate nodes' names: 5000 names of up to 63 characters are about
/// 340 KiB, which leaves over 600 KiB for the pod (whose annotations the API caps at
/// 256 KiB). A bigger body is refused (413) before it is read.
pub const MAX_BODY: usize = 1 << 20;
/// How long a client has to send a request's headers, and then its body; also how long
/// a kept-alive connection may sit idle. kube-scheduler sends its request at once.
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// Bytes of request bodies held at once, all calls together (16 full-size bodies).
pub const BODY_BUDGET: usize = 16 * MAX_BODY;
/// The budget is counted in units of this many bytes (a semaphore counts in u32).
const UNIT: usize = 1024;
/// Calls scored at once; more wait up to [`SCORING_WAIT`], then get 503.
pub const SCORING: usize = 4;
/// How long a call waits for a scoring slot.
pub const SCORING_WAIT: Duration = Duration::from_millis(500);

/// Why a body was not taken.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// It is, or says it is, over [`MAX_BODY`].
    #[error("the request body is over {MAX_BODY} bytes")]
    TooLarge,
    /// It did not arrive within [`READ_TIMEOUT`].
    #[error("the request body took over {READ_TIMEOUT:?} to arrive")]
    Slow,
    /// Other calls hold the whole body budget.
    #[error("busy: other calls hold the request budget")]
    Busy,
    /// The connection failed while it was read.
    #[error("reading the request body: {0}")]
    Broken(String),
}

/// The shared limits of every connection.
#[derive(Clone)]
pub struct Gates {
    budget: Arc<Semaphore>,
    scoring: Arc<Semaphore>,
}

impl Default for Gates {
    fn default() -> Self {
        Gates {
            budget: Arc::new(Semaphore::new(BODY_BUDGET / UNIT)),
            scoring: Arc::new(Semaphore::new(SCORING)),
        }
    }
}

/// A body read whole, and its share of the budget (given back when dropped).
pub struct Taken {
    /// The body.
    pub bytes: Bytes,
    _held: OwnedSemaphorePermit,
}

impl Gates {
    /// Reads `body` (whose Content-Length, if any, is `declared`) within the limits.
    pub async fn read<B>(&self, mut body: B, declared: Option<u64>) -> Result<Taken, Refused>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: std::fmt::Display,
    {
        if declared.is_some_and(|n| n > MAX_BODY as u64) {
            return Err(Refused::TooLarge);
        }
        let deadline = Instant::now() + READ_TIMEOUT;
        let mut held = self
            .budget
            .clone()
            .try_acquire_many_owned(0)
            .map_err(|_| Refused::Busy)?;
        let mut units = 0usize;
        let mut buf = Vec::new();
        loop {
            let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) => return Err(Refused::Slow),
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(Refused::Broken(e.to_string())),
                Ok(Some(Ok(f))) => f,
            };
            let Ok(data) = frame.into_data() else {
                continue; // trailers: nothing to keep
            };
            if buf.len() + data.len() > MAX_BODY {
                return Err(Refused::TooLarge);
            }
            let need = (buf.len() + data.len()).div_ceil(UNIT) - units;
            if need > 0 {
                // `need` is at most MAX_BODY / UNIT, well within u32.
                let n = u32::try_from(need).map_err(|_| Refused::TooLarge)?;
                let more = self.budget.clone().try_acquire_many_owned(n);
                let more = match more {
                    Ok(p) => p,
                    // Short of budget: others' bodies are being read; wait briefly.
                    Err(_) => tokio::time::timeout_at(
                        deadline.min(Instant::now() + SCORING_WAIT),
                        self.budget.clone().acquire_many_owned(n),
                    )
                    .await
                    .map_err(|_| Refused::Busy)?
                    .map_err(|_| Refused::Busy)?,
                };
                held.merge(more);
                units += need;
            }
            buf.extend_from_slice(&data);
        }
        Ok(Taken {
            bytes: Bytes::from(buf),
            _held: held,
        })
    }

    /// A scoring slot, waited for up to [`SCORING_WAIT`].
    pub async fn score_slot(&self) -> Option<OwnedSemaphorePermit> {
        tokio::time::timeout(SCORING_WAIT, self.scoring.clone().acquire_owned())
            .await
            .ok()?
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{Full, StreamBody};
    use hyper::body::Frame;

    #[tokio::test]
    async fn bodies_over_the_cap_are_refused_unread_or_as_they_pass_it() {
        let g = Gates::default();
        let small = Full::new(Bytes::from_static(b"{}"));
        assert_eq!(&g.read(small, Some(2)).await.unwrap().bytes[..], b"{}");
        // Declared too large: refused before a byte is read.
        let never = StreamBody::new(futures::stream::pending::<
            Result<Frame<Bytes>, std::convert::Infallible>,
        >());
        assert!(matches!(
            g.read(never, Some(32 << 20)).await,
            Err(Refused::TooLarge)
        ));
        // Undeclared (chunked): refused once it passes the cap.
        let chunks = futures::stream::iter((0..64).map(|_| {
            Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(vec![b'x'; 64 << 10])))
        }));
        assert!(matches!(
            g.read(StreamBody::new(chunks), None).await,
            Err(Refused::TooLarge)
        ));
        // The budget was given back.
        assert_eq!(g.budget.available_permits(), BODY_BUDGET / UNIT);
    }

    #[tokio::test]
    async fn a_slow_body_times_out_and_a_spent_budget_refuses() {
        let g = Gates::default();
        let slow = StreamBody::new(futures::stream::pending::<
            Result<Frame<Bytes>, std::convert::Infallible>,
        >());
        assert!(matches!(g.read(slow, None).await, Err(Refused::Slow)));
        let all = g
            .budget
            .clone()
            .try_acquire_many_owned((BODY_BUDGET / UNIT) as u32)
            .unwrap();
        let one = Full::new(Bytes::from_static(b"{}"));
        assert!(matches!(g.read(one, None).await, Err(Refused::Busy)));
        drop(all);
        let one = Full::new(Bytes::from_static(b"{}"));
        assert!(g.read(one, None).await.is_ok());
    }
}
