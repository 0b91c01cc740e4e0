//! graft-nri's hot paths in-process, without a runtime: CreateContainer for a pod that holds
//! one of 1000 recorded claims, for one that holds none, and Synchronize with 1000 running
//! containers. Builds only graft-nri's own dependencies, so that a profile (callgrind) and
//! a side-by-side of two trees are cheap; `integration/benches/nri_latency.rs` is the full
//! bench with real containerd instances.
//!
//! The calls run in a task on a worker thread of a two-worker runtime, as graft-nri's
//! handlers do (not on the thread that blocks on the runtime).
//!
//! Run: cargo bench -p graft-nri --bench hot_path [-- create|none|idle|sync] (default: all).
//! `GRAFT_BENCH_CALLS` sets the number of CreateContainer calls (default 5000).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use graft_nri::plugin::GraftPlugin;
use graft_nri_sdk::NriPlugin;
use graft_proto::nri;
use graft_record::*;
use protobuf::Message;

fn claim(i: usize, pod_uid: &str) -> ClaimRecord {
    let dev = "dev-0".to_string();
    ClaimRecord {
        version: FORMAT_VERSION,
        claim: ClaimRef {
            uid: format!("claim-{i:05}"),
            namespace: "default".into(),
            name: format!("claim-{i}"),
        },
        devices: vec![DeviceRecord {
            name: dev.clone(),
            pool: "bench".into(),
            requests: vec!["dev".into()],
            edits: ContainerEdits {
                device_nodes: vec![DeviceNode::char("/dev/graft-bench0", 1, 3, 0o666)],
                env: vec![EnvVar {
                    name: "GRAFT_BENCH".into(),
                    value: i.to_string(),
                }],
                ..Default::default()
            },
        }],
        env: Vec::new(),
        pods: vec![PodRecord {
            uid: pod_uid.into(),
            namespace: "default".into(),
            name: format!("pod-{pod_uid}"),
            containers: vec![ContainerRecord {
                name: "app".into(),
                devices: vec![dev],
            }],
        }],
    }
}

fn plugin_with_claims(dir: &Path, n: usize) -> GraftPlugin {
    let store = RecordStore::open(dir).expect("store");
    for i in 0..n {
        store
            .put_claim(&claim(i, &format!("pod-uid-{i:05}")))
            .expect("put");
    }
    let status = StatusPublisher::acquire(dir, "10-graft", "bench".into()).expect("status");
    let policy =
        InjectionPolicy::new(dir, graft_record::policy::DEFAULT_HOOK_PATH, &[]).expect("policy");
    GraftPlugin::new(store, status, policy)
}

fn request_bytes(pod_uid: &str) -> Vec<u8> {
    let req = nri::CreateContainerRequest {
        pod: Some(nri::PodSandbox {
            id: "sandbox".into(),
            name: "pod".into(),
            uid: pod_uid.into(),
            namespace: "bench".into(),
            ..Default::default()
        })
        .into(),
        container: Some(nri::Container {
            id: "ctr".into(),
            name: "app".into(),
            env: (0..20).map(|i| format!("VAR{i}=value{i}")).collect(),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    };
    req.write_to_bytes().expect("encode")
}

async fn create(
    plugin: &GraftPlugin,
    pod_uid: &str,
    calls: usize,
    idle: Option<Duration>,
) -> Vec<Duration> {
    let bytes = request_bytes(pod_uid);
    let mut out = Vec::with_capacity(calls);
    for _ in 0..calls {
        if let Some(idle) = idle {
            tokio::time::sleep(idle).await;
        }
        let t = Instant::now();
        let req = nri::CreateContainerRequest::parse_from_bytes(&bytes).expect("decode");
        let resp = plugin
            .create_container(
                req.pod.unwrap_or_default(),
                req.container.unwrap_or_default(),
            )
            .await
            .expect("answered");
        let encoded = resp.write_to_bytes().expect("encode");
        out.push(t.elapsed());
        std::hint::black_box(encoded);
    }
    out.sort();
    out
}

fn sync_request(n: usize) -> Vec<u8> {
    let mut req = nri::SynchronizeRequest::new();
    for i in 0..n {
        req.pods.push(nri::PodSandbox {
            id: format!("sandbox-{i}"),
            uid: format!("pod-uid-{i:05}"),
            name: format!("pod-{i}"),
            namespace: "bench".into(),
            ..Default::default()
        });
        let mut linux = nri::LinuxContainer::new();
        linux.devices.push(nri::LinuxDevice {
            path: "/dev/graft-bench0".into(),
            type_: "c".into(),
            major: 1,
            minor: 3,
            ..Default::default()
        });
        let mut ctr = nri::Container {
            id: format!("ctr-{i:05}"),
            pod_sandbox_id: format!("sandbox-{i}"),
            name: "app".into(),
            state: nri::ContainerState::CONTAINER_RUNNING.into(),
            env: (0..20).map(|k| format!("VAR{k}=value{k}")).collect(),
            linux: Some(linux).into(),
            ..Default::default()
        };
        ctr.annotations
            .insert(INJECTED_ANNOTATION.into(), "[]".into());
        req.containers.push(ctr);
    }
    req.write_to_bytes().expect("encode")
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_nanos() as f64 / 1000.0
}

fn main() {
    let what = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
    let want = |w: &str| what.as_deref().is_none_or(|x| x == w);
    let calls: usize = std::env::var("GRAFT_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = Arc::new(plugin_with_claims(dir.path(), 1000));
    // `idle`: 200 calls 20 ms apart, as a runtime makes them (cold caches each time).
    let idle = Some(Duration::from_millis(20));
    for (name, pod, n, idle) in [
        ("create", "pod-uid-00000", calls, None),
        ("none", "pod-uid-none", calls, None),
        ("idle", "pod-uid-00000", 200, idle),
    ] {
        if want(name) {
            let p = plugin.clone();
            let s = rt
                .block_on(rt.spawn(async move {
                    let _warm = create(&p, pod, n / 10 + 1, None).await;
                    create(&p, pod, n, idle).await
                }))
                .expect("bench task");
            println!(
                "CreateContainer, 1000 claims, {name}: p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
                pct(&s, 0.5),
                pct(&s, 0.99),
                pct(&s, 1.0)
            );
        }
    }
    if want("sync") {
        let bytes = sync_request(1000);
        let mut times = Vec::new();
        let mut first = None;
        for _ in 0..30 {
            let t = Instant::now();
            let r = nri::SynchronizeRequest::parse_from_bytes(&bytes).expect("decode");
            let found = plugin.find_uninjected(&r.pods, &r.containers);
            times.push(t.elapsed());
            first.get_or_insert(t.elapsed());
            assert!(found.is_empty());
        }
        times.sort();
        println!(
            "Synchronize, 1000 containers: first {:.2} ms, p50 {:.2} ms, max {:.2} ms",
            first.map_or(0.0, |d| d.as_secs_f64() * 1000.0),
            pct(&times, 0.5) / 1000.0,
            pct(&times, 1.0) / 1000.0
        );
    }
}
