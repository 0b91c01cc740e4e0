//! The HTTP/1.1 endpoint kube-scheduler calls: `POST /prioritize` (the `prioritizeVerb`
//! of the scheduler's extender configuration). Anything else is 404; a body over
//! [`MAX_BODY`] (413), one too slow to arrive (408), one that is not the extender API's
//! JSON (400), a call while others hold every slot (503) or before the caches are filled
//! (503) gets an error, which an `ignorable` extender's scheduler logs and goes on
//! without. A panic while scoring is a 500, never a dead server. Connections are
//! [`crate::listen`]'s.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};

use k8s_openapi::api::core::v1::ObjectReference;

use crate::events::{self, Announced, Notice, Notices};
use crate::intake::{Gates, Refused};
pub use crate::intake::{MAX_BODY, READ_TIMEOUT};
use crate::metrics::Metrics;
use crate::prioritize::{prioritize, Config, View};
use graft_api::extender::ExtenderArgs;

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
async fn answer(
    shared: &Shared,
    gates: &Gates,
    req: Request<Incoming>,
) -> (Answer, &'static str, &'static str) {
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
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let body = match gates.read(req.into_body(), declared).await {
        Ok(b) => b,
        Err(e) => {
            let (status, outcome) = match e {
                Refused::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
                Refused::Slow => (StatusCode::REQUEST_TIMEOUT, "slow"),
                Refused::Busy => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
                Refused::Broken(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            };
            return (text(status, e.to_string()), "prioritize", outcome);
        }
    };
    let args: ExtenderArgs = match serde_json::from_slice(&body.bytes) {
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
    let Some(_slot) = gates.score_slot().await else {
        let a = text(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy: every scoring slot is taken",
        );
        return (a, "prioritize", "busy");
    };
    let s = shared.clone();
    let target = pod_ref(&args);
    let announce = shared.notices.is_some();
    // Scoring reads the caches and computes; a blocking thread keeps it off the runtime's
    // workers, and a panic there is an error answer. Whether the cluster vouches for the
    // pod is asked there too (it reads the claims).
    let scored = tokio::task::spawn_blocking(move || {
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            let scored = prioritize(s.view.as_ref(), &s.config, &args);
            let vouched = announce
                && scored.demand.gpus > 0
                && args
                    .pod
                    .as_ref()
                    .is_some_and(|p| events::vouched(s.view.as_ref(), p));
            (scored, vouched)
        }))
    })
    .await;
    match scored {
        Ok(Ok((scored, vouched))) => match serde_json::to_string(&scored.hosts) {
            Ok(json) => {
                let outcome = if scored.demand.gpus > 0 {
                    "scored"
                } else {
                    "none"
                };
                if scored.demand.gpus > 0 {
                    tracing::debug!(gpus = scored.demand.gpus, one_island = scored.demand.one_island, hosts = ?scored.hosts, "scored");
                    // Only for a pod the cluster vouches for: a call naming any pod it
                    // likes must not put Events on it.
                    if let (Some(notices), Some((pod, uid)), true) =
                        (&shared.notices, target, vouched)
                    {
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

/// Answers one request, counting it.
pub(crate) async fn handle(
    shared: Shared,
    gates: Gates,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let ((status, content_type, body), verb, outcome) = answer(&shared, &gates, req).await;
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

#[cfg(test)]
mod tests;
