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

/// Synchronize as the SDK hands it to the plugin: the request decoded, then the handler,
/// until its answer. The check of the running containers runs after the answer; this waits
/// for it too, so that runs do not overlap. Returns the time to the answer and to the end of
/// the check. `dir` is the plugin's state directory (its status file counts the checks).
pub fn synchronize(
    rt: &tokio::runtime::Runtime,
    plugin: &GraftPlugin,
    dir: &Path,
    bytes: &[u8],
) -> (Duration, Duration) {
    let verified = || {
        graft_record::read_status(dir)
            .ok()
            .flatten()
            .map_or(0, |s| s.verified_syncs)
    };
    let before = verified();
    let t = Instant::now();
    let answered = rt.block_on(async {
        let r = nri::SynchronizeRequest::parse_from_bytes(bytes).expect("decode");
        let runtime = graft_nri_sdk::Runtime::unconnected().expect("runtime");
        let updates = plugin
            .synchronize(runtime, r.pods, r.containers)
            .await
            .expect("synchronize");
        assert!(updates.is_empty());
        t.elapsed()
    });
    while verified() == before {
        assert!(t.elapsed() < Duration::from_secs(30), "never verified");
        std::thread::sleep(Duration::from_micros(200));
    }
    (answered, t.elapsed())
}

/// `runs` Synchronize requests `bytes`, each to a fresh plugin on the records in `dir`
/// ([`synchronize`]): the times to the answer and to the check's end, each sorted, and
/// how many answers took at most 10 ms.
pub fn synchronize_runs(
    dir: &Path,
    bytes: &[u8],
    runs: usize,
) -> (Vec<Duration>, Vec<Duration>, usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (mut answer, mut checked) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let plugin = fresh_plugin(dir);
        let (a, c) = synchronize(&rt, &plugin, dir, bytes);
        answer.push(a);
        checked.push(c);
    }
    let within = answer
        .iter()
        .filter(|d| **d <= Duration::from_millis(10))
        .count();
    answer.sort();
    checked.sort();
    (answer, checked, within)
}
