//! Fixtures shared by graft-nri's two plugin-side benches: `hot_path` (this crate) and
//! `integration/benches/nri_latency.rs`, which includes this file by path. One place for the
//! claims, the requests and the timed call loop, so the two report the same work.

#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use graft_nri::plugin::GraftPlugin;
use graft_nri_sdk::NriPlugin;
use graft_proto::nri;
use graft_record::*;
use protobuf::Message;

pub fn claim(i: usize, pod_uid: &str) -> ClaimRecord {
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

pub fn plugin_with_claims(dir: &Path, n: usize) -> GraftPlugin {
    let store = RecordStore::open(dir).expect("store");
    for i in 0..n {
        store
            .put_claim(&claim(i, &format!("pod-uid-{i:05}")))
            .expect("put");
    }
    fresh_plugin(dir)
}

/// A new plugin on the records already in `dir`, its record cache empty, as when graft-nri
/// starts and the runtime synchronizes. The previous plugin on `dir` must be dropped first
/// (it holds the status file).
pub fn fresh_plugin(dir: &Path) -> GraftPlugin {
    let store = RecordStore::open(dir).expect("store");
    // The previous plugin's tasks may still hold the status file for a moment.
    let started = Instant::now();
    let status = loop {
        match StatusPublisher::acquire(dir, "10-graft", "bench".into()) {
            Ok(s) => break s,
            Err(e) if started.elapsed() > Duration::from_secs(5) => panic!("status: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    };
    let policy =
        InjectionPolicy::new(dir, graft_record::policy::DEFAULT_HOOK_PATH, &[]).expect("policy");
    GraftPlugin::new(store, status, policy)
}

pub fn request_bytes(pod_uid: &str) -> Vec<u8> {
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

pub async fn create(
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

pub fn sync_request(n: usize) -> Vec<u8> {
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

/// Synchronize as containerd sends it: the encoded request `bytes` to a fresh plugin
/// through the SDK over a socket pair (the SDK's scripted runtime on the other end), timed
/// from the runtime's call to the reply it reads; then until the check of the running
/// containers after the answer ends, so that runs do not overlap. `first` is
/// [`graft_nri_sdk::Options::inline_synchronize`]: the answer before the request is
/// decoded, or (off) through ttrpc, decoded and handled first. `dir` is the plugin's state
/// directory (its status file counts the checks).
pub fn synchronize(
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    bytes: &[u8],
    first: bool,
) -> (Duration, Duration) {
    use graft_nri_sdk::scripted::ScriptedRuntime;
    use graft_nri_sdk::{ttrpc, Options, Transport};

    let verified = || {
        graft_record::read_status(dir)
            .ok()
            .flatten()
            .map_or(0, |s| s.verified_syncs)
    };
    let plugin = std::sync::Arc::new(fresh_plugin(dir));
    let before = verified();
    let (t, answered, runtime, session) = rt.block_on(async {
        let mut runtime = ScriptedRuntime::start().await.expect("runtime end");
        let mut opts = Options::new("graft", "10", Transport::PreInstalled(runtime.plugin_fd));
        opts.inline_synchronize = first;
        let session = tokio::spawn(graft_nri_sdk::run(plugin, opts));
        runtime.registered.recv().await.expect("registered");
        runtime.configure_as("v2.2.7").await.expect("configure");
        let req = ttrpc::proto::Request {
            service: "nri.pkg.api.v1alpha1.Plugin".into(),
            method: "Synchronize".into(),
            payload: bytes.to_vec(),
            ..Default::default()
        };
        let t = Instant::now();
        let reply = runtime.raw.request(req).await.expect("answered");
        let answered = t.elapsed();
        assert_eq!(reply.status.code(), ttrpc::Code::OK, "{:?}", reply.status);
        (t, answered, runtime, session)
    });
    while verified() == before {
        assert!(t.elapsed() < Duration::from_secs(30), "never verified");
        std::thread::sleep(Duration::from_micros(200));
    }
    let checked = t.elapsed();
    // The runtime goes away; a pre-installed plugin's session then ends and drops it.
    rt.block_on(async {
        let ScriptedRuntime {
            mut server, mux, ..
        } = runtime;
        let _ = server.shutdown().await;
        drop(mux);
        let _ = tokio::time::timeout(Duration::from_secs(5), session).await;
    });
    (answered, checked)
}

/// Times of `runs` rounds of [`synchronize`], each round both ways in turn (the order
/// alternating), each run a fresh plugin on the records in `dir`.
pub struct SyncRuns {
    /// Answered first, before decoding: time to the answer, to the check's end.
    pub first: (Vec<Duration>, Vec<Duration>),
    /// Through ttrpc, decoded and handled first.
    pub ttrpc: (Vec<Duration>, Vec<Duration>),
}

pub fn synchronize_runs(dir: &Path, bytes: &[u8], runs: usize) -> SyncRuns {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut out = SyncRuns {
        first: (Vec::new(), Vec::new()),
        ttrpc: (Vec::new(), Vec::new()),
    };
    for round in 0..runs {
        for first in [round % 2 == 0, round % 2 == 1] {
            let (a, c) = synchronize(&rt, dir, bytes, first);
            let side = if first {
                &mut out.first
            } else {
                &mut out.ttrpc
            };
            side.0.push(a);
            side.1.push(c);
        }
    }
    out
}

/// How many of `answers` took at most 10 ms, and the sorted copy.
pub fn within_10ms(answers: &[Duration]) -> (usize, Vec<Duration>) {
    let mut sorted = answers.to_vec();
    sorted.sort();
    let n = sorted
        .iter()
        .filter(|d| **d <= Duration::from_millis(10))
        .count();
    (n, sorted)
}
