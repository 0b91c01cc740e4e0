//! `fetch` against a fake API server over HTTP: the order of the answer, the bound on
//! concurrent GETs, and every error case.
//!
//! The fake serves GETs of single objects only, as the real server does at
//! `/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}` and
//! `/api/v1/namespaces/{ns}/pods/{name}` (Kubernetes API reference, "ResourceClaim v1" and
//! "Pod", operation "read"). A missing object is a 404 whose body is a `Status` with reason
//! `NotFound`, and a server failure a 500 with a `Status` body (Kubernetes API conventions,
//! "HTTP Status codes" and "Response Status Kind"); anything else it does not know is a 404
//! too, so a request the driver should not make fails. A GET with `resourceVersion=0` is
//! answered from `watch_cache` where the test put the object there, as the real server
//! answers it from its watch cache, which may be behind etcd (API concepts, "Semantics for
//! get and list", resourceVersion "0": any version); else as a quorum GET.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::errors::CallError;
use super::fetch::fetch;
use super::pods::PodCache;
use crate::model::ClaimId;

const NS: &str = "ns";
const DRIVER: &str = "graft.dev";

#[derive(Default)]
struct Fake {
    objects: HashMap<String, (u16, Value)>,
    watch_cache: HashMap<String, (u16, Value)>,
    /// Every request's target, path and query.
    seen: std::sync::Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    most: AtomicUsize,
    gets: AtomicUsize,
}

fn status(code: u16, reason: &str) -> (u16, Value) {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": reason, "code": code, "message": reason});
    (code, body)
}

impl Fake {
    fn claim_path(name: &str) -> String {
        format!("/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/{name}")
    }

    fn pod_path(name: &str) -> String {
        format!("/api/v1/namespaces/{NS}/pods/{name}")
    }

    /// Claim `name` (uid `name`-uid), allocated a device of this driver, reserved for
    /// `pods`; its pods, named `name`-pod-i, are added too.
    fn claim(&mut self, name: &str, pods: usize) {
        let reserved: Vec<Value> = (0..pods)
            .map(|i| json!({"resource": "pods", "name": format!("{name}-pod-{i}"), "uid": format!("{name}-pod-{i}-uid")}))
            .collect();
        let claim = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NS, "uid": format!("{name}-uid")},
            "spec": {},
            "status": {
                "allocation": {"devices": {"results": [
                    {"driver": DRIVER, "pool": "node", "device": format!("dev-{name}"), "request": "r"},
                    {"driver": "other.dev", "pool": "node", "device": "x", "request": "o"},
                ]}},
                "reservedFor": reserved,
            }
        });
        self.objects.insert(Self::claim_path(name), (200, claim));
        for i in 0..pods {
            self.pod(
                name,
                &format!("{name}-pod-{i}"),
                &format!("{name}-pod-{i}-uid"),
            );
        }
    }

    fn pod(&mut self, claim: &str, name: &str, uid: &str) {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": uid},
            "spec": {
                "containers": [{"name": "c", "resources": {"claims": [{"name": "dev"}]}}],
                "resourceClaims": [{"name": "dev", "resourceClaimName": claim}],
            }
        });
        self.objects.insert(Self::pod_path(name), (200, pod));
    }

    /// Serves until the test ends; returns a client of it.
    async fn serve(self, delay: Duration) -> (kube::Client, Arc<Fake>) {
        let fake = Arc::new(self);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let f = Arc::clone(&fake);
        tokio::spawn(async move {
            loop {
                let Ok((conn, _)) = listener.accept().await else {
                    return;
                };
                let f = Arc::clone(&f);
                tokio::spawn(async move {
                    let (r, mut w) = conn.into_split();
                    let mut lines = BufReader::new(r).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        let path = line.split(' ').nth(1).unwrap_or("").to_string();
                        // Headers, up to the empty line; a GET has no body.
                        while let Ok(Some(h)) = lines.next_line().await {
                            if h.is_empty() {
                                break;
                            }
                        }
                        let now = f.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        f.most.fetch_max(now, Ordering::SeqCst);
                        f.gets.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(delay).await;
                        f.seen.lock().unwrap().push(path.clone());
                        let (path, query) = path.split_once('?').unwrap_or((&path, ""));
                        let any = query.split('&').any(|q| q == "resourceVersion=0");
                        let cached = any.then(|| f.watch_cache.get(path)).flatten();
                        let (code, body) = cached
                            .or_else(|| f.objects.get(path))
                            .cloned()
                            .unwrap_or_else(|| status(404, "NotFound"));
                        let body = body.to_string();
                        // One write: a second small one would wait for the client's
                        // delayed ACK (Nagle), which no real server makes it do.
                        let answer = format!(
                            "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        f.in_flight.fetch_sub(1, Ordering::SeqCst);
                        if w.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        (kube::Client::try_from(config).unwrap(), fake)
    }
}

fn id(name: &str) -> ClaimId {
    ClaimId {
        namespace: NS.into(),
        uid: format!("{name}-uid"),
        name: name.into(),
    }
}

#[tokio::test]
async fn claims_come_back_in_the_calls_order_read_concurrently_and_bounded() {
    let mut fake = Fake::default();
    let names: Vec<String> = (0..40).map(|i| format!("c{i}")).collect();
    for n in &names {
        fake.claim(n, 1);
    }
    let (client, fake) = fake.serve(Duration::from_millis(20)).await;
    let ids: Vec<ClaimId> = names.iter().map(|n| id(n)).collect();
    let got = fetch(&client, DRIVER, &PodCache::default(), &ids)
        .await
        .unwrap()
        .claims;
    assert_eq!(got.iter().map(|c| c.id.clone()).collect::<Vec<_>>(), ids);
    for c in &got {
        assert_eq!(c.results.len(), 1, "only this driver's results");
        assert_eq!(c.pods.len(), 1);
        assert_eq!(c.pods[0].name, format!("{}-pod-0", c.id.name));
        assert!(c.pod_errors.is_empty());
    }
    assert_eq!(fake.gets.load(Ordering::SeqCst), 80);
    let most = fake.most.load(Ordering::SeqCst);
    assert!(most > 1, "the GETs ran one at a time");
    assert!(most <= 16, "{most} GETs at once");
}

#[tokio::test]
async fn the_first_failing_claim_in_the_calls_order_fails_the_call() {
    let mut fake = Fake::default();
    fake.claim("ok", 1);
    fake.claim("replaced", 0);
    let (code, mut v) = fake.objects[&Fake::claim_path("replaced")].clone();
    v["metadata"]["uid"] = json!("another-uid");
    fake.objects.insert(Fake::claim_path("replaced"), (code, v));
    fake.claim("unallocated", 0);
    let (code, mut v) = fake.objects[&Fake::claim_path("unallocated")].clone();
    v["status"] = json!({});
    fake.objects
        .insert(Fake::claim_path("unallocated"), (code, v));
    fake.objects
        .insert(Fake::claim_path("broken"), status(500, "InternalError"));
    let (client, _fake) = fake.serve(Duration::from_millis(5)).await;
    let call = |names: &[&str]| {
        let ids: Vec<ClaimId> = names.iter().map(|n| id(n)).collect();
        let client = client.clone();
        async move {
            fetch(&client, DRIVER, &PodCache::default(), &ids)
                .await
                .unwrap_err()
        }
    };
    let e = call(&["ok", "replaced", "missing"]).await;
    assert!(
        matches!(&e, CallError::Replaced { found, .. } if found == "another-uid"),
        "{e}"
    );
    let e = call(&["ok", "missing", "replaced"]).await;
    assert!(
        matches!(&e, CallError::NotFound { claim } if claim.contains("missing")),
        "{e}"
    );
    let e = call(&["unallocated", "missing"]).await;
    assert!(matches!(e, CallError::NotAllocated { .. }), "{e}");
    let e = call(&["ok", "broken"]).await;
    assert!(matches!(e, CallError::Fetch { .. }), "{e}");
}

#[tokio::test]
async fn an_unreadable_pod_is_a_pod_error_and_a_gone_or_replaced_one_is_skipped() {
    let mut fake = Fake::default();
    fake.claim("shared", 4);
    fake.objects
        .insert(Fake::pod_path("shared-pod-0"), status(500, "InternalError"));
    fake.objects.remove(&Fake::pod_path("shared-pod-1"));
    fake.pod("shared", "shared-pod-2", "a-new-pod-uid");
    let (client, _fake) = fake.serve(Duration::from_millis(5)).await;
    let got = fetch(&client, DRIVER, &PodCache::default(), &[id("shared")])
        .await
        .unwrap();
    let c = &got.claims[0];
    assert_eq!(
        c.pods.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["shared-pod-3"]
    );
    assert_eq!(c.pod_errors.len(), 1, "{:?}", c.pod_errors);
    assert!(c.pod_errors[0].contains("shared-pod-0"));
}

#[tokio::test]
async fn a_cached_pod_that_references_the_claim_saves_its_get_and_any_other_is_read() {
    let mut fake = Fake::default();
    fake.claim("c", 4);
    let cached = |fake: &Fake, i: usize| -> Pod {
        let (_, v) = &fake.objects[&Fake::pod_path(&format!("c-pod-{i}"))];
        serde_json::from_value(v.clone()).unwrap()
    };
    // pod 0 is cached as it is, and the server no longer has it: only the cache can
    // answer. Pod 1 is cached under an older UID, pod 2 from before its claim reference
    // counted (no `resourceClaims`), pod 3 not at all: those three are read.
    let p0 = cached(&fake, 0);
    let mut p1 = cached(&fake, 1);
    p1.metadata.uid = Some("an-older-uid".into());
    let mut p2 = cached(&fake, 2);
    p2.spec.as_mut().unwrap().resource_claims = None;
    fake.objects.remove(&Fake::pod_path("c-pod-0"));
    let cache = PodCache::with(vec![p0, p1, p2]);
    let (client, fake) = fake.serve(Duration::from_millis(1)).await;
    let got = fetch(&client, DRIVER, &cache, &[id("c")]).await.unwrap();
    assert_eq!(got.pods_cached, 1);
    let c = &got.claims[0];
    assert_eq!(
        c.pods.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["c-pod-0", "c-pod-1", "c-pod-2", "c-pod-3"],
        "in reservedFor's order"
    );
    assert_eq!(c.pods[0].uid, "c-pod-0-uid");
    assert_eq!(c.pods[0].containers.len(), 1);
    assert!(c.pod_errors.is_empty(), "{:?}", c.pod_errors);
    assert_eq!(
        fake.gets.load(Ordering::SeqCst),
        1 + 3,
        "the claim and three pods"
    );
}

#[tokio::test]
async fn a_pod_from_the_servers_watch_cache_stands_in_only_under_the_caches_rule() {
    let mut fake = Fake::default();
    fake.claim("w", 4);
    let current = |fake: &Fake, i: usize| {
        fake.objects[&Fake::pod_path(&format!("w-pod-{i}"))]
            .1
            .clone()
    };
    // Pod 0: the watch cache has it as it is. Pod 1: under an older UID. Pod 2: from before
    // it referenced the claim. Pod 3: not yet.
    let mut p1 = current(&fake, 1);
    p1["metadata"]["uid"] = json!("an-older-uid");
    let mut p2 = current(&fake, 2);
    p2["spec"]["resourceClaims"] = json!([]);
    for (i, v) in [(1, (200, p1)), (2, (200, p2)), (3, status(404, "NotFound"))] {
        fake.watch_cache
            .insert(Fake::pod_path(&format!("w-pod-{i}")), v);
    }
    let (client, fake) = fake.serve(Duration::from_millis(1)).await;
    let got = fetch(&client, DRIVER, &PodCache::default(), &[id("w")])
        .await
        .unwrap();
    let c = &got.claims[0];
    assert_eq!(
        c.pods
            .iter()
            .map(|p| (p.name.as_str(), p.containers.len()))
            .collect::<Vec<_>>(),
        [
            ("w-pod-0", 1),
            ("w-pod-1", 1),
            ("w-pod-2", 1),
            ("w-pod-3", 1)
        ],
        "every pod as the quorum read has it"
    );
    assert_eq!(c.pods[1].uid, "w-pod-1-uid");
    let seen = fake.seen.lock().unwrap().clone();
    let count = |what: &str| seen.iter().filter(|s| s.contains(what)).count();
    assert_eq!(seen.len(), 1 + 1 + 2 * 3, "{seen:#?}");
    assert_eq!(
        count("resourceVersion=0"),
        4,
        "each pod from the watch cache first"
    );
    assert_eq!(count("w-pod-0"), 1, "a pod that stands in is read once");
    assert!(
        seen.iter()
            .filter(|s| s.contains("resourceclaims"))
            .all(|s| !s.contains("resourceVersion")),
        "claims are quorum reads only: {seen:#?}"
    );
}

/// The API reads of a 100-claim call, each GET answered after 1 ms, against the same reads
/// one after the other (what `fetch` did before), alternating, 5 rounds. Run:
/// `cargo test -p graft-driver-core --release --lib fetch_tests::timing -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement"]
async fn timing() {
    let mut fake = Fake::default();
    let names: Vec<String> = (0..100).map(|i| format!("c{i}")).collect();
    for n in &names {
        fake.claim(n, 1);
    }
    let (client, _fake) = fake.serve(Duration::from_millis(1)).await;
    let ids: Vec<ClaimId> = names.iter().map(|n| id(n)).collect();
    fetch(&client, DRIVER, &PodCache::default(), &ids)
        .await
        .unwrap();
    let (mut conc, mut seq) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let t = std::time::Instant::now();
        fetch(&client, DRIVER, &PodCache::default(), &ids)
            .await
            .unwrap();
        conc.push(t.elapsed().as_secs_f64() * 1e3);
        let t = std::time::Instant::now();
        for id in &ids {
            fetch(
                &client,
                DRIVER,
                &PodCache::default(),
                std::slice::from_ref(id),
            )
            .await
            .unwrap();
        }
        seq.push(t.elapsed().as_secs_f64() * 1e3);
    }
    conc.sort_by(f64::total_cmp);
    seq.sort_by(f64::total_cmp);
    println!(
        "100 claims, 1 ms per GET: concurrent median {:.1} ms, one at a time {:.1} ms, ratio {:.3}",
        conc[2],
        seq[2],
        conc[2] / seq[2]
    );
}
