//! The HTTP/1.1 endpoint kube-scheduler calls: `POST /prioritize` (the `prioritizeVerb`
//! of the scheduler's extender configuration). Anything else is 404; a body over
//! [`MAX_BODY`], one that is not the extender API's JSON, or a call before the caches are
//! filled gets an error, which an `ignorable` extender's scheduler logs and goes on
//! without. A panic while scoring is a 500, never a dead server.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use k8s_openapi::api::core::v1::ObjectReference;

use crate::events::{self, Announced, Notice, Notices};
use crate::metrics::Metrics;
use crate::prioritize::{prioritize, Config, View};
use crate::wire::ExtenderArgs;

/// The largest request body read: a pod and a node list of a large cluster (with
/// `nodeCacheCapable: true` the scheduler sends names only, a few KiB).
pub const MAX_BODY: usize = 32 << 20;
/// Connections served at once; more wait for a slot.
const MAX_CONNECTIONS: usize = 64;
/// The scheduler sends its request at once; a client slower than this is dropped.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What every call needs.
#[derive(Clone)]
pub struct Shared {
    /// The caches.
    pub view: Arc<dyn View>,
    /// How to score.
    pub config: Arc<Config>,
    /// Where calls are counted.
    pub metrics: Metrics,
    /// Where Events for scored pods go (`None`: no Events).
    pub notices: Option<Notices>,
    /// The pods announced already.
    pub announced: Arc<Mutex<Announced>>,
}

/// The pod of `args` as an Event's object, with its uid.
fn pod_ref(args: &ExtenderArgs) -> Option<(ObjectReference, String)> {
    let meta = &args.pod.as_ref()?.metadata;
    let uid = meta.uid.clone()?;
    let r = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: Some(uid.clone()),
        ..ObjectReference::default()
    };
    Some((r, uid))
}

/// An answer: status, content type, body.
type Answer = (StatusCode, &'static str, String);

fn text(status: StatusCode, msg: impl Into<String>) -> Answer {
    let mut m = msg.into();
    m.push('\n');
    (status, "text/plain; charset=utf-8", m)
}

/// Answers one request; `verb` and `outcome` are counted.
async fn answer(shared: &Shared, req: Request<Incoming>) -> (Answer, &'static str, &'static str) {
    if req.uri().path() != "/prioritize" {
        let a = text(
            StatusCode::NOT_FOUND,
            "not found: this extender serves POST /prioritize",
        );
        return (a, "other", "bad_request");
    }
    if req.method() != Method::POST {
        return (
            text(StatusCode::METHOD_NOT_ALLOWED, "only POST"),
            "prioritize",
            "bad_request",
        );
    }
    let body = match tokio::time::timeout(
        READ_TIMEOUT,
        Limited::new(req.into_body(), MAX_BODY).collect(),
    )
    .await
    {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) => {
            let a = text(
                StatusCode::BAD_REQUEST,
                format!("reading the request (at most {MAX_BODY} bytes): {e}"),
            );
            return (a, "prioritize", "bad_request");
        }
        Err(_) => {
            let a = text(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request took over {READ_TIMEOUT:?}"),
            );
            return (a, "prioritize", "bad_request");
        }
    };
    let args: ExtenderArgs = match serde_json::from_slice(&body) {
        Ok(a) => a,
        Err(e) => {
            let a = text(
                StatusCode::BAD_REQUEST,
                format!("not the extender API's ExtenderArgs: {e}"),
            );
            return (a, "prioritize", "bad_request");
        }
    };
    if !shared.view.ready() {
        let a = text(
            StatusCode::SERVICE_UNAVAILABLE,
            "the ResourceSlice and ResourceClaim caches are not filled yet",
        );
        return (a, "prioritize", "not_ready");
    }
    let s = shared.clone();
    let target = pod_ref(&args);
    // Scoring reads the caches and computes; a blocking thread keeps it off the runtime's
    // workers, and a panic there is an error answer.
    let scored = tokio::task::spawn_blocking(move || {
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            prioritize(s.view.as_ref(), &s.config, &args)
        }))
    })
    .await;
    match scored {
        Ok(Ok(scored)) => match serde_json::to_string(&scored.hosts) {
            Ok(json) => {
                let outcome = if scored.demand.gpus > 0 {
                    "scored"
                } else {
                    "none"
                };
                if scored.demand.gpus > 0 {
                    tracing::debug!(gpus = scored.demand.gpus, one_island = scored.demand.one_island, hosts = ?scored.hosts, "scored");
                    if let (Some(notices), Some((pod, uid))) = (&shared.notices, target) {
                        let first = shared
                            .announced
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .first(&uid);
                        if first {
                            notices.send(Notice {
                                pod,
                                note: events::note(&scored),
                            });
                        }
                    }
                }
                (
                    (StatusCode::OK, "application/json", json),
                    "prioritize",
                    outcome,
                )
            }
            Err(e) => (
                text(StatusCode::INTERNAL_SERVER_ERROR, format!("encoding: {e}")),
                "prioritize",
                "error",
            ),
        },
        _ => {
            tracing::error!("scoring failed (panicked); answered with an error");
            (
                text(StatusCode::INTERNAL_SERVER_ERROR, "scoring failed"),
                "prioritize",
                "error",
            )
        }
    }
}

async fn handle(shared: Shared, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let ((status, content_type, body), verb, outcome) = answer(&shared, req).await;
    shared.metrics.count(verb, outcome);
    shared
        .metrics
        .duration
        .observe(started.elapsed().as_secs_f64());
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// Binds `addr`; the returned listener is then served by [`serve`].
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `listener` until the task is dropped or accepting fails for good.
pub async fn serve(listener: TcpListener, shared: Shared) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = slots
            .clone()
            .acquire_owned()
            .await
            .map_err(std::io::Error::other)?;
        let (io, _) = match listener.accept().await {
            Ok(c) => c,
            // Out of descriptors and the like pass; try again shortly.
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |req| {
                let s = shared.clone();
                async move { Ok::<_, Infallible>(handle(s, req).await) }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(READ_TIMEOUT);
            if let Err(e) = builder.serve_connection(TokioIo::new(io), service).await {
                tracing::debug!(error = %e, "extender connection ended with an error");
            }
        });
    }
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
