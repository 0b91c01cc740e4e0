//! The three endpoints and the HTTP/1.1 connection they are served on.

use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::registry::Registry;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

use crate::error::NotReady;

/// The `Content-Type` of `/metrics`.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

/// Headers beyond this are refused (431); hyper's smallest allowed buffer.
pub(crate) const MAX_HEADER_BYTES: usize = 8192;
/// A client must send its request headers within this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// No connection lives longer (keep-alive scrapers reconnect).
const CONNECTION_LIMIT: Duration = Duration::from_secs(60);
/// A readiness check that takes longer counts as not ready.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether the daemon is ready: `Ok(why)` or `Err(why not)`, one line each. It may read
/// files: it runs on a blocking thread.
pub type ReadyCheck = Arc<dyn Fn() -> Result<String, NotReady> + Send + Sync>;

/// A readiness check's answer; `None` until it has one.
type Verdict = Option<Result<String, NotReady>>;

/// The readiness check, run at most once at a time: a request that comes while one runs
/// waits for that one's answer instead of starting another. A check that hangs (a stuck
/// file read) holds one blocking thread, not one per request, and the next request after it
/// ends starts a fresh one.
#[derive(Clone)]
struct SharedCheck {
    check: ReadyCheck,
    running: Arc<Mutex<Option<watch::Receiver<Verdict>>>>,
}

/// Clears the running slot when the check's thread is done with it, panic or not.
struct Finished(Arc<Mutex<Option<watch::Receiver<Verdict>>>>);

impl Drop for Finished {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

impl SharedCheck {
    /// The running check's answer, or a new check's (closed unanswered: it panicked).
    fn verdict(&self) -> watch::Receiver<Verdict> {
        let mut slot = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(rx) = &*slot {
            return rx.clone();
        }
        let (tx, rx) = watch::channel(None);
        *slot = Some(rx.clone());
        let (check, finished) = (self.check.clone(), Finished(self.running.clone()));
        tokio::task::spawn_blocking(move || {
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| check()));
            // The slot is cleared before the verdict goes out, so whoever asks after hearing
            // it starts a fresh check rather than reading this one's answer again.
            drop(finished);
            // A panic drops `tx` unsent: the waiters see the channel closed.
            if let Ok(v) = result {
                let _ = tx.send(Some(v));
            }
        });
        rx
    }
}

/// What the server answers with.
#[derive(Clone)]
pub struct Endpoints {
    registry: Arc<Registry>,
    ready: SharedCheck,
}

impl Endpoints {
    /// `/metrics` encodes `registry`; `/readyz` asks `ready`.
    pub fn new(registry: Registry, ready: ReadyCheck) -> Self {
        Endpoints {
            registry: Arc::new(registry),
            ready: SharedCheck {
                check: ready,
                running: Arc::default(),
            },
        }
    }

    /// The registry in OpenMetrics text.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::with_capacity(4096);
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }

    /// The answer to one request: status, content type, body.
    pub async fn answer(&self, method: &Method, path: &str) -> (StatusCode, &'static str, String) {
        if method != Method::GET && method != Method::HEAD {
            return (StatusCode::METHOD_NOT_ALLOWED, TEXT, "only GET\n".into());
        }
        match path {
            "/metrics" => match self.encode() {
                Ok(body) => (StatusCode::OK, OPENMETRICS_CONTENT_TYPE, body),
                Err(_) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    TEXT,
                    "cannot encode metrics\n".into(),
                ),
            },
            // Answering at all is the liveness signal: the runtime and this task run.
            "/healthz" => (StatusCode::OK, TEXT, "ok\n".into()),
            "/readyz" => {
                let mut verdict = self.ready.verdict();
                let answer = tokio::time::timeout(READY_TIMEOUT, verdict.wait_for(|v| v.is_some()))
                    .await
                    .map(|r| r.ok().and_then(|v| v.clone()));
                match answer {
                    Ok(Some(Ok(why))) => (StatusCode::OK, TEXT, line(&why)),
                    Ok(Some(Err(why))) => (StatusCode::SERVICE_UNAVAILABLE, TEXT, line(&why.0)),
                    Ok(None) => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        TEXT,
                        "readiness check failed internally\n".into(),
                    ),
                    Err(_) => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        TEXT,
                        format!("readiness check not answered within {READY_TIMEOUT:?}\n"),
                    ),
                }
            }
            _ => (
                StatusCode::NOT_FOUND,
                TEXT,
                "not found: try /metrics, /healthz, /readyz\n".into(),
            ),
        }
    }

    async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let (status, content_type, body) = self.answer(req.method(), req.uri().path()).await;
        let mut resp = Response::new(Full::new(Bytes::from(body)));
        *resp.status_mut() = status;
        resp.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        resp
    }
}

/// One line, whatever the check said.
fn line(s: &str) -> String {
    let mut one: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    one.truncate(1024);
    one.push('\n');
    one
}

/// Serves HTTP/1.1 on one accepted connection until the client closes it, it misbehaves,
/// or [`CONNECTION_LIMIT`] passes.
pub(crate) async fn serve_connection<S>(endpoints: Endpoints, io: S)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let ep = endpoints.clone();
        async move { Ok::<_, Infallible>(ep.handle(req).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_HEADER_BYTES);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    match tokio::time::timeout(CONNECTION_LIMIT, conn).await {
        Ok(Ok(())) | Err(_) => {}
        Ok(Err(e)) => tracing::debug!(error = %e, "metrics connection ended with an error"),
    }
}
