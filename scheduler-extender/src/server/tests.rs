//! The endpoint over a real socket, as kube-scheduler calls it, with a recording view.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::listen::{bind, serve};
use crate::score::Mode;
use graft_api::extender::HostPriority;

struct Fixed {
    ready: AtomicBool,
    slices: Vec<Arc<ResourceSlice>>,
    claims: Vec<Arc<ResourceClaim>>,
}

impl View for Fixed {
    fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
    /// The full rebuild, the index's reference.
    fn nodes(&self, names: &[String]) -> Vec<crate::state::NodeGpus> {
        let all = crate::state::nodes(
            "graft.dev",
            self.slices.iter().map(|s| s.as_ref()),
            self.claims.iter().map(|c| c.as_ref()),
        );
        names
            .iter()
            .map(|n| all.get(n).cloned().unwrap_or_default())
            .collect()
    }
    fn claim(&self, ns: &str, name: &str) -> Option<Arc<ResourceClaim>> {
        self.claims
            .iter()
            .find(|c| {
                c.metadata.namespace.as_deref() == Some(ns)
                    && c.metadata.name.as_deref() == Some(name)
            })
            .cloned()
    }
}

/// Node `node` with `n` whole GPUs, the first `used` held by a claim.
fn node(node: &str, n: usize, used: usize) -> (ResourceSlice, ResourceClaim) {
    let devices: Vec<_> = (0..n)
        .map(|i| json!({"name": format!("gpu-{i}"), "attributes": {"type": {"string": "gpu"}, "nvlinkIsland": {"string": "x"}}}))
        .collect();
    let slice = serde_json::from_value(json!({
        "metadata": {"name": format!("{node}-0")},
        "spec": {"driver": "graft.dev", "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}
    }))
    .unwrap();
    let results: Vec<_> = (0..used)
        .map(|i| json!({"request": "g", "driver": "graft.dev", "pool": node, "device": format!("gpu-{i}")}))
        .collect();
    let claim = serde_json::from_value(json!({
        "metadata": {"name": format!("held-{node}"), "namespace": "other"},
        "spec": {},
        "status": {"allocation": {"devices": {"results": results}}}
    }))
    .unwrap();
    (slice, claim)
}

async fn start(ready: bool) -> SocketAddr {
    start_with(ready, None).await
}

async fn start_with(ready: bool, notices: Option<Notices>) -> SocketAddr {
    let (sa, ca) = node("a", 8, 0);
    let (sb, cb) = node("b", 8, 6);
    // Made from p's template: owned by p (uid u-p).
    let want: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": "p-gpus", "namespace": "ns",
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-p"}]},
        "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.graft.dev", "count": 2}}]}}
    }))
    .unwrap();
    let view = Fixed {
        ready: AtomicBool::new(ready),
        slices: vec![Arc::new(sa), Arc::new(sb)],
        claims: vec![Arc::new(ca), Arc::new(cb), Arc::new(want)],
    };
    let shared = Shared {
        view: Arc::new(view),
        config: Arc::new(Config {
            driver: "graft.dev".into(),
            classes: vec!["gpu.graft.dev".into()],
            mode: Mode::Pack,
        }),
        metrics: Metrics::register(&mut Registry::default()),
        notices,
        announced: Arc::default(),
    };
    let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, None, shared));
    addr
}

/// One request; the status code and the body.
async fn call(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out
        .split_once("\r\n\r\n")
        .map(|x| x.1.to_string())
        .unwrap_or_default();
    (status, body)
}

/// ExtenderArgs as kube-scheduler encodes it with `nodeCacheCapable: true`.
fn args(claims: serde_json::Value) -> String {
    args_for("p", "u-p", claims)
}

fn args_for(pod: &str, uid: &str, claims: serde_json::Value) -> String {
    json!({
        "Pod": {"metadata": {"name": pod, "namespace": "ns", "uid": uid},
                "spec": {"containers": [], "resourceClaims": claims}},
        "Nodes": null,
        "NodeNames": ["a", "b", "c"]
    })
    .to_string()
}

#[tokio::test]
async fn a_gpu_pod_is_scored_and_others_get_zero() {
    let addr = start(true).await;
    let (status, body) = call(
        addr,
        "POST",
        "/prioritize",
        &args(json!([{"name": "g", "resourceClaimName": "p-gpus"}])),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let hosts: Vec<HostPriority> = serde_json::from_str(&body).unwrap();
    let score = |h: &str| hosts.iter().find(|x| x.host == h).unwrap().score;
    // b has 2 free of 8: the placement fills it; a stays whole; c has no GPUs.
    assert!(score("b") > score("a"), "{hosts:?}");
    assert_eq!(score("c"), 0);

    let (status, body) = call(addr, "POST", "/prioritize", &args(json!([]))).await;
    assert_eq!(status, 200);
    let hosts: Vec<HostPriority> = serde_json::from_str(&body).unwrap();
    assert!(
        hosts.iter().all(|h| h.score == 0) && hosts.len() == 3,
        "{hosts:?}"
    );
}

#[tokio::test]
async fn bad_calls_get_clear_errors() {
    let addr = start(true).await;
    let (status, body) = call(addr, "POST", "/prioritize", "{\"Pod\": 3}").await;
    assert_eq!(status, 400);
    assert!(
        body.contains("not the extender API's ExtenderArgs"),
        "{body}"
    );
    assert_eq!(call(addr, "GET", "/prioritize", "").await.0, 405);
    assert_eq!(call(addr, "POST", "/filter", "{}").await.0, 404);
    let big = "x".repeat(MAX_BODY + 1);
    let (status, body) = call(addr, "POST", "/prioritize", &big).await;
    assert_eq!(status, 413, "{body}");
}

/// A GPU pod the claims vouch for gets one Event; a call naming another pod, or p with
/// another uid, with p's claim gets its scores but puts no Event on anything.
#[tokio::test]
async fn events_only_for_pods_the_claims_vouch_for() {
    let (notices, mut queued) = events::queue();
    let addr = start_with(true, Some(notices)).await;
    let claims = json!([{"name": "g", "resourceClaimName": "p-gpus"}]);
    for (pod, uid) in [("p", "forged"), ("victim", "u-p"), ("victim", "u-v")] {
        let (status, body) = call(
            addr,
            "POST",
            "/prioritize",
            &args_for(pod, uid, claims.clone()),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    assert!(
        queued.try_recv().is_err(),
        "an Event for a pod nothing vouches for"
    );
    let (status, _) = call(addr, "POST", "/prioritize", &args(claims)).await;
    assert_eq!(status, 200);
    let n = queued.try_recv().expect("no Event for the genuine pod");
    assert_eq!(n.pod.uid.as_deref(), Some("u-p"));
    assert!(n.note.starts_with("2 whole GPUs"), "{}", n.note);
}

/// Idle and trickling sockets, more than the old fixed pool of 64, do not keep the
/// scheduler's call waiting; a trickler is dropped after the read timeout.
#[tokio::test]
async fn slow_sockets_do_not_hold_up_calls() {
    let addr = start(true).await;
    let mut idle = Vec::new();
    for _ in 0..100 {
        idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    let mut trickle = tokio::net::TcpStream::connect(addr).await.unwrap();
    trickle
        .write_all(b"POST /prioritize HTTP/1.1\r\n")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let (status, _) = call(addr, "POST", "/prioritize", &args(json!([]))).await;
    assert_eq!(status, 200);
    assert!(started.elapsed() < READ_TIMEOUT, "{:?}", started.elapsed());
    // The trickler's headers never finish: it is closed after READ_TIMEOUT.
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(READ_TIMEOUT * 3, trickle.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "a trickling socket was kept past the read timeout"
    );
}

#[tokio::test]
async fn before_the_caches_fill_it_says_so() {
    let addr = start(false).await;
    let (status, body) = call(addr, "POST", "/prioritize", &args(json!([]))).await;
    assert_eq!(status, 503);
    assert!(body.contains("not filled yet"), "{body}");
}
