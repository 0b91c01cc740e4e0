//! The endpoint over a real socket, as kube-scheduler calls it, with a recording view.

use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::score::Mode;
use crate::wire::HostPriority;

struct Fixed {
    ready: AtomicBool,
    slices: Vec<Arc<ResourceSlice>>,
    claims: Vec<Arc<ResourceClaim>>,
}

impl View for Fixed {
    fn ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
    fn slices(&self) -> Vec<Arc<ResourceSlice>> {
        self.slices.clone()
    }
    fn claims(&self) -> Vec<Arc<ResourceClaim>> {
        self.claims.clone()
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
    let (sa, ca) = node("a", 8, 0);
    let (sb, cb) = node("b", 8, 6);
    let want: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": "p-gpus", "namespace": "ns"},
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
        notices: None,
        announced: Arc::default(),
    };
    let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, shared));
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
    json!({
        "Pod": {"metadata": {"name": "p", "namespace": "ns"},
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
    assert_eq!(status, 400, "{body}");
}

#[tokio::test]
async fn before_the_caches_fill_it_says_so() {
    let addr = start(false).await;
    let (status, body) = call(addr, "POST", "/prioritize", &args(json!([]))).await;
    assert_eq!(status, 503);
    assert!(body.contains("not filled yet"), "{body}");
}
