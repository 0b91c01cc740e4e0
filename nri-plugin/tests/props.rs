//! Property tests for everything graft-nri decodes from the runtime's socket: the NRI trunk
//! frames (`mux`), the ttrpc messages on top of them, the NRI protobuf messages, and what
//! graft does with a decoded request (`inject::plan`, the plugin's CreateContainer,
//! Synchronize and lifecycle paths). graft-nri runs as root next to containerd: no input may
//! make it panic, hang, or allocate what a header merely claims.
//!
//! Inputs are arbitrary bytes and structure-aware mutations of valid instances: generated
//! frames and messages, encoded, then bytes flipped, inserted, deleted, duplicated or cut.
//! Every test is bounded: explicit case counts, no failure persistence, and timeouts around
//! everything asynchronous.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::os::fd::IntoRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::Duration;

use async_trait::async_trait;
use graft_nri::inject::plan;
use graft_nri::plugin::GraftPlugin;
use graft_nri_sdk::mux::{Mux, HEADER_LEN, MAX_PAYLOAD, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN};
use graft_nri_sdk::{self as sdk, NriPlugin, Options, Transport};
use graft_proto::nri::{self, ContainerState, Event};
use graft_proto::nri_ttrpc;
use graft_record::{InjectionPolicy, RecordStore, StatusPublisher, INJECTED_ANNOTATION};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use protobuf::{EnumOrUnknown, Message as _};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use ttrpc::r#async::transport::Listener;
use ttrpc::r#async::{Server, TtrpcContext};

#[path = "../../record/tests/support/mutate.rs"]
mod mutate;
mod support;
use mutate::Mutation;

const POD: &str = "5e0c9a8b-1d2f-4e3a-8b7c-6d5e4f3a2b10";
const POD_ID: &str = "0123456789abcdef";

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        max_shrink_iters: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn run<S: Strategy>(cases: u32, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    if let Err(e) = TestRunner::new(config(cases)).run(&strategy, test) {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------------------
// The largest single allocation made on the current thread while tracking is on. Tests that
// check allocation drive everything on a current-thread runtime, so the mux's reader task
// runs (and allocates) on the test's own thread.

struct Tracking;

thread_local! {
    static TRACK: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = TRACK.try_with(|t| {
        if t.get() {
            let _ = LARGEST.try_with(|m| m.set(m.get().max(size)));
        }
    });
}

// SAFETY: forwards to the system allocator; only records sizes.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|m| m.set(0));
    TRACK.with(|t| t.set(true));
    let out = f();
    TRACK.with(|t| t.set(false));
    (out, LARGEST.with(|m| m.get()))
}

/// Panics on the threads of the session runtime (tokio swallows those of spawned tasks)
/// and of the test driving it; other tests' threads are not counted.
static PANICS: AtomicUsize = AtomicUsize::new(0);
const SESSION_THREADS: &str = "graft-props-session";

fn count_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let name = std::thread::current().name().unwrap_or("").to_string();
            if name == SESSION_THREADS || name.contains("ttrpc_sessions_survive_malformed_input") {
                PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// Byte-level mutation.

/// Protobuf and framing fragments: varint continuations, big lengths, field tags.
const TOKENS: &[&[u8]] = &[
    &[0x80],
    &[0xff, 0xff, 0xff, 0xff, 0x0f],
    &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
    &[0x0a, 0xff, 0xff, 0xff, 0xff, 0x07],
    &[0x12, 0x7f],
    &[0x0a, 0x00],
    &[0x1a, 0x03, b'a', b'p', b'p'],
    &[0x08, 0x96, 0x01],
    &[0x0b],
    &[0x0c],
    &[0x0f],
    &[0xc0, 0x80],
    &[0xed, 0xa0, 0x80],
    &[0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04],
    &[0x00, 0x40, 0x00, 0x0b],
    &[0x7f, 0xff, 0xff, 0xff],
];

fn mutation() -> impl Strategy<Value = Mutation> {
    mutate::mutation(
        TOKENS.len(),
        mutate::Mix {
            flip: 2,
            set: 2,
            token: 2,
            delete_max: 32,
            duplicate_max: 64,
        },
    )
}

fn mutated(data: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
    mutate::mutated(data, muts, TOKENS)
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 0..4)
}

// ---------------------------------------------------------------------------------------
// 1. The trunk multiplexer.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The stream ended between frames (or inside a header).
    Closed,
    /// A header announced more than MAX_PAYLOAD.
    Oversize,
    /// The stream ended inside a payload.
    Truncated,
}

/// What the mux must deliver on connections 1 and 2, and why it must stop.
fn model(stream: &[u8]) -> (Vec<u8>, Vec<u8>, End) {
    let (mut one, mut two) = (Vec::new(), Vec::new());
    let mut at = 0;
    loop {
        if stream.len() - at < HEADER_LEN {
            return (one, two, End::Closed);
        }
        let h = &stream[at..at + HEADER_LEN];
        let id = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let len = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
        at += HEADER_LEN;
        if len > MAX_PAYLOAD {
            return (one, two, End::Oversize);
        }
        if stream.len() - at < len {
            return (one, two, End::Truncated);
        }
        let payload = &stream[at..at + len];
        match id {
            PLUGIN_SERVICE_CONN => one.extend_from_slice(payload),
            RUNTIME_SERVICE_CONN => two.extend_from_slice(payload),
            _ => {}
        }
        at += len;
    }
}

/// Feeds `stream` into a mux in `chunks`, reads both logical connections to their end and
/// returns what they got and the mux's close reason.
fn run_mux(stream: Vec<u8>, chunks: Vec<usize>) -> Result<(Vec<u8>, Vec<u8>, String), String> {
    let rt = current_thread();
    rt.block_on(async move {
        let (ours, mut peer) = tokio::io::duplex(4096);
        let mux = Mux::new(ours);
        let mut c1 = mux.open(PLUGIN_SERVICE_CONN);
        let mut c2 = mux.open(RUNTIME_SERVICE_CONN);
        // The writer may block for good once the mux stops reading; it dies with the runtime.
        tokio::spawn(async move {
            let mut at = 0;
            for n in chunks.iter().cycle() {
                if at >= stream.len() {
                    break;
                }
                let n = (*n).min(stream.len() - at);
                if peer.write_all(&stream[at..at + n]).await.is_err() {
                    return;
                }
                at += n;
            }
            // Dropping `peer` ends the trunk.
        });
        let read_all = async {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let (ra, rb) = tokio::join!(c1.read_to_end(&mut a), c2.read_to_end(&mut b));
            ra.map_err(|e| format!("conn 1: {e}"))?;
            rb.map_err(|e| format!("conn 2: {e}"))?;
            let reason = mux.closed().await;
            Ok::<_, String>((a, b, reason))
        };
        tokio::time::timeout(Duration::from_secs(10), read_all)
            .await
            .map_err(|_| "the mux did not close within 10 s".to_string())?
    })
}

#[derive(Debug, Clone)]
struct Frame {
    id: u32,
    payload: Vec<u8>,
    /// A length to announce instead of the payload's.
    declared: Option<u32>,
}

fn frame() -> impl Strategy<Value = Frame> {
    (
        prop_oneof![
            4 => Just(PLUGIN_SERVICE_CONN),
            4 => Just(RUNTIME_SERVICE_CONN),
            1 => Just(0u32),
            1 => any::<u32>(),
        ],
        prop::collection::vec(any::<u8>(), 0..96),
        prop_oneof![
            12 => Just(None),
            1 => Just(Some(MAX_PAYLOAD as u32)),
            1 => Just(Some(MAX_PAYLOAD as u32 + 1)),
            1 => Just(Some(u32::MAX)),
            1 => any::<u32>().prop_map(Some),
            1 => (0u32..200).prop_map(Some),
        ],
    )
        .prop_map(|(id, payload, declared)| Frame {
            id,
            payload,
            declared,
        })
}

fn encode_frames(frames: &[Frame]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        out.extend_from_slice(&f.id.to_be_bytes());
        let len = f.declared.unwrap_or(f.payload.len() as u32);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&f.payload);
    }
    out
}

fn trunk_stream() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..300),
        3 => (prop::collection::vec(frame(), 0..8), mutations())
            .prop_map(|(frames, muts)| mutated(encode_frames(&frames), &muts)),
    ]
}

/// Any byte stream: the mux delivers exactly the payloads of the complete frames before the
/// first bad or cut one, to the connection each names, drops the rest, ends both logical
/// streams and reports why, and never allocates more than one maximal frame.
#[test]
fn mux_read_side_follows_the_frame_model() {
    run(
        1500,
        (trunk_stream(), prop::collection::vec(1usize..64, 1..4)),
        |(stream, chunks)| {
            let (want1, want2, end) = model(&stream);
            let (got, largest) = largest_allocation(|| run_mux(stream.clone(), chunks));
            let (got1, got2, reason) = got.map_err(TestCaseError::fail)?;
            prop_assert_eq!(got1, want1);
            prop_assert_eq!(got2, want2);
            let expected = match end {
                End::Closed => "runtime closed the connection",
                End::Oversize => "exceeds",
                End::Truncated => "inside a frame",
            };
            prop_assert!(reason.contains(expected), "{end:?}: {reason}");
            // A payload buffer is allocated once its header is read; only up to MAX_PAYLOAD.
            prop_assert!(
                largest <= MAX_PAYLOAD + 64 * 1024,
                "allocated {largest} bytes at once"
            );
            let announced_small = {
                let mut at = 0;
                let mut small = true;
                while stream.len() - at >= HEADER_LEN {
                    let h = &stream[at..at + HEADER_LEN];
                    let len = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
                    if len > MAX_PAYLOAD {
                        break;
                    }
                    small &= len <= 4096;
                    at += HEADER_LEN + len.min(stream.len() - at - HEADER_LEN);
                }
                small
            };
            if announced_small {
                prop_assert!(largest <= 64 * 1024, "allocated {largest} bytes at once");
            }
            Ok(())
        },
    );
}

/// An oversized header closes the trunk at once, without waiting for (or allocating) its
/// payload, while the peer keeps the connection open.
#[test]
fn mux_refuses_oversized_headers_without_allocating_them() {
    for len in [MAX_PAYLOAD as u32 + 1, 0x8000_0000, u32::MAX] {
        let rt = current_thread();
        let (reason, largest) = largest_allocation(|| {
            rt.block_on(async {
                let (ours, mut peer) = tokio::io::duplex(64);
                let mux = Mux::new(ours);
                let mut c1 = mux.open(PLUGIN_SERVICE_CONN);
                let mut h = PLUGIN_SERVICE_CONN.to_be_bytes().to_vec();
                h.extend(len.to_be_bytes());
                peer.write_all(&h).await.unwrap();
                let reason = tokio::time::timeout(Duration::from_secs(5), mux.closed())
                    .await
                    .expect("closed without the peer closing");
                let mut buf = Vec::new();
                assert_eq!(c1.read_to_end(&mut buf).await.unwrap(), 0);
                drop(peer);
                reason
            })
        });
        assert!(reason.contains("exceeds"), "{reason}");
        assert!(largest < 64 * 1024, "{len}: allocated {largest} bytes");
    }
}

// ---------------------------------------------------------------------------------------
// 2. NRI messages, and what graft does with them.

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9./_-]{0,12}",
        1 => any::<String>(),
        1 => Just(String::new()),
    ]
}

fn string_map() -> impl Strategy<Value = std::collections::HashMap<String, String>> {
    prop::collection::hash_map(
        prop_oneof![
            4 => "[a-z./-]{1,10}",
            1 => Just(INJECTED_ANNOTATION.to_string()),
        ],
        text(),
        0..3,
    )
}

fn pod_sandbox() -> impl Strategy<Value = nri::PodSandbox> {
    (
        prop_oneof![3 => Just(POD_ID.to_string()), 1 => text()],
        text(),
        prop_oneof![
            6 => Just(POD.to_string()),
            1 => "[a-z0-9-]{1,36}",
            1 => text(),
            1 => Just("../claims".to_string()),
        ],
        text(),
        string_map(),
        string_map(),
        text(),
    )
        .prop_map(
            |(id, name, uid, namespace, labels, annotations, runtime_handler)| nri::PodSandbox {
                id,
                name,
                uid,
                namespace,
                labels,
                annotations,
                runtime_handler,
                ..Default::default()
            },
        )
}

fn linux_device() -> impl Strategy<Value = nri::LinuxDevice> {
    (
        prop_oneof![
            Just("/dev/fuse".to_string()),
            Just("/dev/net/tun".to_string()),
            Just("/dev/null".to_string()),
            text()
        ],
        prop_oneof![Just("c".to_string()), Just("b".to_string()), text()],
        prop_oneof![Just(10i64), any::<i64>()],
        prop_oneof![Just(229i64), Just(200i64), any::<i64>()],
        prop::option::of(any::<u32>()),
    )
        .prop_map(|(path, type_, major, minor, mode)| nri::LinuxDevice {
            path,
            type_,
            major,
            minor,
            file_mode: mode
                .map(|value| nri::OptionalFileMode {
                    value,
                    ..Default::default()
                })
                .into(),
            ..Default::default()
        })
}

fn container() -> impl Strategy<Value = nri::Container> {
    (
        (
            "[a-f0-9]{0,16}",
            prop_oneof![3 => Just(POD_ID.to_string()), 1 => text()],
            prop_oneof![
                4 => Just("app".to_string()),
                2 => Just("init-net".to_string()),
                2 => Just("both".to_string()),
                1 => Just("sidecar".to_string()),
                1 => text(),
            ],
            prop_oneof![4 => 0i32..5, 1 => any::<i32>()],
        ),
        (
            string_map(),
            string_map(),
            prop::collection::vec(text(), 0..3),
            prop::collection::vec(text(), 0..3),
        ),
        prop::collection::vec(
            (text(), text(), text(), prop::collection::vec(text(), 0..2)),
            0..2,
        ),
        prop::option::of((prop::collection::vec(linux_device(), 0..4), text())),
        any::<u32>(),
    )
        .prop_map(
            |(
                (id, pod_sandbox_id, name, state),
                (labels, annotations, args, env),
                mounts,
                linux,
                pid,
            )| {
                nri::Container {
                    id,
                    pod_sandbox_id,
                    name,
                    state: EnumOrUnknown::from_i32(state),
                    labels,
                    annotations,
                    args,
                    env,
                    mounts: mounts
                        .into_iter()
                        .map(|(destination, type_, source, options)| nri::Mount {
                            destination,
                            type_,
                            source,
                            options,
                            ..Default::default()
                        })
                        .collect(),
                    linux: linux
                        .map(|(devices, cgroups_path)| nri::LinuxContainer {
                            devices,
                            cgroups_path,
                            ..Default::default()
                        })
                        .into(),
                    pid,
                    ..Default::default()
                }
            },
        )
}

fn create_request() -> impl Strategy<Value = nri::CreateContainerRequest> {
    (
        prop::option::weighted(0.95, pod_sandbox()),
        prop::option::weighted(0.95, container()),
    )
        .prop_map(|(pod, ctr)| nri::CreateContainerRequest {
            pod: pod.into(),
            container: ctr.into(),
            ..Default::default()
        })
}

fn synchronize_request() -> impl Strategy<Value = nri::SynchronizeRequest> {
    (
        prop::collection::vec(pod_sandbox(), 0..3),
        prop::collection::vec(container(), 0..4),
        any::<bool>(),
    )
        .prop_map(|(pods, containers, more)| nri::SynchronizeRequest {
            pods,
            containers,
            more,
            ..Default::default()
        })
}

fn state_change() -> impl Strategy<Value = nri::StateChangeEvent> {
    (
        prop_oneof![4 => 0i32..16, 1 => any::<i32>()],
        prop::option::weighted(0.9, pod_sandbox()),
        prop::option::weighted(0.9, container()),
    )
        .prop_map(|(event, pod, ctr)| nri::StateChangeEvent {
            event: EnumOrUnknown::from_i32(event),
            pod: pod.into(),
            container: ctr.into(),
            ..Default::default()
        })
}

fn configure_request() -> impl Strategy<Value = nri::ConfigureRequest> {
    (
        text(),
        prop_oneof![
            Just("containerd".to_string()),
            Just("v2".to_string()),
            Just("cri-o".to_string()),
            text()
        ],
        prop_oneof![
            Just("v1.7.24".to_string()),
            Just("2.2.7+unknown".to_string()),
            Just("v99999999999.1".to_string()),
            Just("v2.".to_string()),
            Just("vvvv".to_string()),
            "v?[0-9]{0,12}[.~+-]?[0-9]{0,12}[.~+-]?[0-9a-z]{0,4}",
            any::<String>(),
        ],
        any::<i64>(),
        any::<i64>(),
        prop_oneof![Just(String::new()), Just("v0.12.0".to_string()), text()],
    )
        .prop_map(
            |(
                config,
                runtime_name,
                runtime_version,
                registration_timeout,
                request_timeout,
                nri,
            )| {
                nri::ConfigureRequest {
                    config,
                    runtime_name,
                    runtime_version,
                    registration_timeout,
                    request_timeout,
                    NRI_version: nri,
                    ..Default::default()
                }
            },
        )
}

/// Parses; a message that parses must encode and parse back to itself.
fn reparse<M: protobuf::Message + PartialEq + std::fmt::Debug>(
    bytes: &[u8],
) -> Result<Option<M>, TestCaseError> {
    match M::parse_from_bytes(bytes) {
        Ok(m) => {
            let again = m
                .write_to_bytes()
                .map_err(|e| TestCaseError::fail(format!("cannot re-encode {m:?}: {e}")))?;
            let back = M::parse_from_bytes(&again)
                .map_err(|e| TestCaseError::fail(format!("re-encoded {m:?} fails: {e}")))?;
            prop_assert_eq!(&back, &m);
            Ok(Some(m))
        }
        Err(_) => Ok(None),
    }
}

/// Every message type graft-nri decodes, from one input.
fn parse_all(bytes: &[u8]) -> Result<(), TestCaseError> {
    reparse::<nri::ConfigureRequest>(bytes)?;
    reparse::<nri::SynchronizeRequest>(bytes)?;
    reparse::<nri::CreateContainerRequest>(bytes)?;
    reparse::<nri::StateChangeEvent>(bytes)?;
    reparse::<nri::UpdateContainerRequest>(bytes)?;
    reparse::<nri::StopContainerRequest>(bytes)?;
    reparse::<nri::RemoveContainerRequest>(bytes)?;
    reparse::<nri::RunPodSandboxRequest>(bytes)?;
    reparse::<nri::ValidateContainerAdjustmentRequest>(bytes)?;
    reparse::<nri::UpdateContainersResponse>(bytes)?;
    reparse::<nri::RegisterPluginRequest>(bytes)?;
    reparse::<nri::Empty>(bytes)?;
    Ok(())
}

/// A plugin over a store whose pod POD holds:
/// - c1: `fuse` (/dev/fuse, GRAFT_FUSE=1, a bind mount from the state directory and a
///   graft-hook hook) and `tun`; app gets both, init-net gets tun, both gets fuse;
/// - c2: `fuse2` (the same /dev/fuse node, mount and hook, but GRAFT_FUSE=2) and `null`;
///   app gets null, both gets fuse2, which conflicts with c1's fuse.
struct Env {
    _dir: tempfile::TempDir,
    store: RecordStore,
    policy: InjectionPolicy,
    plugin: Arc<GraftPlugin>,
}

fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let (store, policy, mut c1) = support::fixture(dir.path(), POD);
    c1.pods[0].containers.push(graft_record::ContainerRecord {
        name: "both".into(),
        devices: vec!["fuse".into()],
    });
    store.put_claim(&c1).unwrap();
    let mut c2 = c1.clone();
    c2.claim.uid = "c2".into();
    c2.claim.name = "second".into();
    c2.devices[0].name = "fuse2".into();
    c2.devices[0].edits.env[0].value = "2".into();
    c2.devices[1].name = "null".into();
    c2.devices[1].edits.device_nodes[0] = graft_record::DeviceNode::char("/dev/null", 1, 3, 0o666);
    c2.pods[0].containers = vec![
        graft_record::ContainerRecord {
            name: "app".into(),
            devices: vec!["null".into()],
        },
        graft_record::ContainerRecord {
            name: "both".into(),
            devices: vec!["fuse2".into()],
        },
    ];
    store.put_claim(&c2).unwrap();
    let status =
        StatusPublisher::acquire(dir.path(), "10-graft", "boot".into()).expect("status lock");
    let plugin = GraftPlugin::new(store.clone(), status, policy.clone())
        .with_eviction_grace(Duration::from_millis(10));
    Env {
        _dir: dir,
        store,
        policy,
        plugin: Arc::new(plugin),
    }
}

fn status_code(e: &ttrpc::Error) -> Option<ttrpc::Code> {
    match e {
        ttrpc::Error::RpcStatus(s) => Some(s.code()),
        _ => None,
    }
}

/// What the plugin's CreateContainer must answer, from `plan` over the same store.
fn check_create(
    env: &Env,
    rt: &tokio::runtime::Runtime,
    req: nri::CreateContainerRequest,
) -> Result<(), TestCaseError> {
    let pod = req.pod.unwrap_or_default();
    let ctr = req.container.unwrap_or_default();
    let claims = env
        .store
        .pod_claims(&pod.uid)
        .map_err(|e| TestCaseError::fail(format!("store: {e}")))?;
    let expected = plan(&claims, &pod.uid, &ctr.name, &env.policy);
    if let Ok(Some(p)) = &expected {
        let _ = p.annotation();
        let _ = p.missing_from(&ctr);
    }
    let got = rt.block_on(env.plugin.create_container(pod.clone(), ctr.clone()));
    match (&expected, &got) {
        (Ok(None), Ok(resp)) => prop_assert!(resp.adjust.is_none()),
        (Ok(Some(p)), Ok(resp)) => {
            prop_assert_eq!(resp.adjust.as_ref(), Some(&p.adjustment()));
            prop_assert!(pod.uid == POD);
        }
        (Err(_), Err(e)) => {
            prop_assert_eq!(status_code(e), Some(ttrpc::Code::FAILED_PRECONDITION))
        }
        _ => prop_assert!(false, "plan {expected:?} but plugin {got:?}"),
    }
    if pod.uid == POD {
        match ctr.name.as_str() {
            "app" => prop_assert!(
                matches!(&got, Ok(r) if r.adjust.linux.devices.len() == 3),
                "{got:?}"
            ),
            "both" => prop_assert!(got.is_err()),
            _ => {}
        }
    }
    Ok(())
}

#[test]
fn nri_messages_from_arbitrary_bytes() {
    run(3000, prop::collection::vec(any::<u8>(), 0..200), |bytes| {
        parse_all(&bytes)
    });
}

/// Mutated CreateContainer requests: decode, then the plugin's CreateContainer, which must
/// inject exactly `plan`'s edits, refuse conflicts with FAILED_PRECONDITION, and leave pods
/// without records alone.
#[test]
fn create_container_from_mutated_requests() {
    let env = env();
    let rt = current_thread();
    run(800, (create_request(), mutations()), |(req, muts)| {
        let bytes = mutated(req.write_to_bytes().unwrap(), &muts);
        parse_all(&bytes)?;
        if muts.is_empty() {
            prop_assert_eq!(
                &nri::CreateContainerRequest::parse_from_bytes(&bytes).unwrap(),
                &req
            );
        }
        if let Some(decoded) = reparse::<nri::CreateContainerRequest>(&bytes)? {
            check_create(&env, &rt, decoded)?;
        }
        Ok(())
    });
}

/// Mutated Synchronize requests: `find_uninjected` reports only live containers of pods
/// that hold records and whose spec lacks them.
#[test]
fn synchronize_from_mutated_requests() {
    let env = env();
    run(400, (synchronize_request(), mutations()), |(req, muts)| {
        let bytes = mutated(req.write_to_bytes().unwrap(), &muts);
        let Some(decoded) = reparse::<nri::SynchronizeRequest>(&bytes)? else {
            return Ok(());
        };
        let found = env
            .plugin
            .find_uninjected(&decoded.pods, &decoded.containers);
        for (ctr, why) in &found {
            prop_assert!(decoded.containers.contains(ctr));
            prop_assert!(matches!(
                ctr.state.enum_value(),
                Ok(ContainerState::CONTAINER_CREATED
                    | ContainerState::CONTAINER_RUNNING
                    | ContainerState::CONTAINER_PAUSED)
            ));
            let pod = decoded
                .pods
                .iter()
                .rev() // the plugin's map by id keeps the last pod of an id
                .find(|p| p.id == ctr.pod_sandbox_id)
                .expect("a pod");
            prop_assert!(!env.store.pod_claims(&pod.uid).unwrap().is_empty());
            prop_assert!(!why.is_empty());
        }
        Ok(())
    });
}

/// Mutated StateChange, UpdateContainer, StopContainer and Configure messages: the lifecycle
/// path and the runtime-version gate.
#[test]
fn events_and_configure_from_mutated_requests() {
    let env = env();
    let rt = current_thread();
    run(
        600,
        (
            state_change(),
            configure_request(),
            mutations(),
            mutations(),
        ),
        |(ev, conf, m1, m2)| {
            let bytes = mutated(ev.write_to_bytes().unwrap(), &m1);
            if let Some(ev) = reparse::<nri::StateChangeEvent>(&bytes)? {
                let event = ev.event.enum_value_or(Event::UNKNOWN);
                let r = rt.block_on(env.plugin.lifecycle(
                    event,
                    ev.pod.clone().into_option(),
                    ev.container.clone().into_option(),
                ));
                prop_assert!(r.is_ok());
            }
            if let Some(up) = reparse::<nri::UpdateContainerRequest>(&bytes)? {
                let r = rt.block_on(env.plugin.lifecycle(
                    Event::UPDATE_CONTAINER,
                    up.pod.into_option(),
                    up.container.into_option(),
                ));
                prop_assert!(r.is_ok());
            }
            if let Some(stop) = reparse::<nri::StopContainerRequest>(&bytes)? {
                let r = rt.block_on(env.plugin.lifecycle(
                    Event::STOP_CONTAINER,
                    stop.pod.into_option(),
                    stop.container.into_option(),
                ));
                prop_assert!(r.is_ok());
            }
            let bytes = mutated(conf.write_to_bytes().unwrap(), &m2);
            if let Some(c) = reparse::<nri::ConfigureRequest>(&bytes)? {
                let mask = graft_nri_sdk::event_mask::valid_events(
                    &c.runtime_name,
                    &c.runtime_version,
                    &c.NRI_version,
                );
                prop_assert!(
                    mask == graft_nri_sdk::event_mask::VALID_BEFORE_NRI_0_10
                        || mask == graft_nri_sdk::event_mask::VALID_FROM_NRI_0_10
                );
            }
            Ok(())
        },
    );
}

// ---------------------------------------------------------------------------------------
// 3. Whole sessions: the SDK and GraftPlugin behind the real ttrpc server, fed well-formed
//    requests with mutated payloads, malformed ttrpc frames and raw bytes.

const SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
const METHODS: &[&str] = &[
    "Configure",
    "Synchronize",
    "Shutdown",
    "CreateContainer",
    "StateChange",
    "StopContainer",
    "RemoveContainer",
    "UpdateContainer",
    "RunPodSandbox",
    "ValidateContainerAdjustment",
    "NoSuchMethod",
];

#[derive(Debug, Clone)]
enum WireItem {
    /// A well-formed ttrpc request (odd stream id) whose payload may be anything.
    Request {
        method: usize,
        payload: Vec<u8>,
        timeout_nano: i64,
    },
    /// A ttrpc header with any fields, then a body.
    Frame {
        declared: Option<u32>,
        stream: u32,
        kind: u8,
        flags: u8,
        body: Vec<u8>,
    },
    Bytes(Vec<u8>),
}

fn payload_for(method: usize) -> BoxedStrategy<Vec<u8>> {
    let encoded: BoxedStrategy<Vec<u8>> = match METHODS[method] {
        "Configure" => configure_request()
            .prop_map(|m| m.write_to_bytes().unwrap())
            .boxed(),
        "Synchronize" => synchronize_request()
            .prop_map(|m| m.write_to_bytes().unwrap())
            .boxed(),
        "StateChange" => state_change()
            .prop_map(|m| m.write_to_bytes().unwrap())
            .boxed(),
        _ => create_request()
            .prop_map(|m| m.write_to_bytes().unwrap())
            .boxed(),
    };
    prop_oneof![
        6 => (encoded, mutations()).prop_map(|(b, m)| mutated(b, &m)),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ]
    .boxed()
}

fn wire_item() -> impl Strategy<Value = WireItem> {
    prop_oneof![
        8 => (0..METHODS.len())
            .prop_flat_map(|m| (Just(m), payload_for(m), prop_oneof![
                4 => Just(0i64),
                1 => Just(-1i64),
                1 => Just(i64::MIN),
                1 => Just(i64::MAX),
                1 => 1i64..1_000_000,
            ]))
            .prop_map(|(method, payload, timeout_nano)| WireItem::Request {
                method,
                payload,
                timeout_nano,
            }),
        2 => (
            prop_oneof![
                4 => Just(None),
                1 => Just(Some(u32::MAX)),
                1 => Just(Some((4 << 20) + 1)),
                1 => (0u32..100).prop_map(Some),
            ],
            any::<u32>(),
            prop_oneof![Just(1u8), Just(2u8), Just(3u8), any::<u8>()],
            any::<u8>(),
            prop::collection::vec(any::<u8>(), 0..64),
        )
            .prop_map(|(declared, stream, kind, flags, body)| WireItem::Frame {
                declared,
                stream,
                kind,
                flags,
                body,
            }),
        1 => prop::collection::vec(any::<u8>(), 0..48).prop_map(WireItem::Bytes),
    ]
}

fn ttrpc_frame(stream: u32, kind: u8, flags: u8, declared: Option<u32>, body: &[u8]) -> Vec<u8> {
    let mut out = declared.unwrap_or(body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(&stream.to_be_bytes());
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(body);
    out
}

fn ttrpc_request(stream: u32, method: &str, payload: Vec<u8>, timeout_nano: i64) -> Vec<u8> {
    let mut req = ttrpc::Request::new();
    req.service = SERVICE.into();
    req.method = method.into();
    req.payload = payload;
    req.timeout_nano = timeout_nano;
    ttrpc_frame(stream, 1, 0, None, &req.write_to_bytes().unwrap())
}

/// What `response_for` says when the plugin ended the connection.
const CLOSED: &str = "the plugin ended the connection";

/// Reads ttrpc frames from `conn` until the response for `stream` arrives; [`CLOSED`] when
/// the connection ends first.
async fn response_for(
    conn: &mut graft_nri_sdk::mux::MuxConn,
    stream: u32,
) -> Result<ttrpc::Response, String> {
    let closed = |e: std::io::Error| format!("{CLOSED}: {e}");
    loop {
        let mut h = [0u8; 10];
        conn.read_exact(&mut h).await.map_err(closed)?;
        let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let sid = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let mut body = vec![0u8; len];
        conn.read_exact(&mut body).await.map_err(closed)?;
        if sid == stream && h[8] == 2 {
            return Ok(ttrpc::Response::parse_from_bytes(&body).expect("a response"));
        }
    }
}

struct FakeRuntime {
    registered: tokio::sync::mpsc::UnboundedSender<()>,
}

#[async_trait]
impl nri_ttrpc::Runtime for FakeRuntime {
    async fn register_plugin(
        &self,
        _ctx: &TtrpcContext,
        _req: nri::RegisterPluginRequest,
    ) -> ttrpc::Result<nri::Empty> {
        let _ = self.registered.send(());
        Ok(nri::Empty::new())
    }
}

fn serve_once(conn: graft_nri_sdk::mux::MuxConn) -> Listener {
    use futures::StreamExt;
    Listener::new(
        futures::stream::once(async move { Ok::<_, std::io::Error>(conn) })
            .chain(futures::stream::pending()),
    )
}

/// One connection: register, Configure, the items, then (when every item was a
/// well-formed request) a CreateContainer that must still be answered with the injection;
/// then the runtime goes away and the pre-installed plugin must end.
async fn session(plugin: Arc<GraftPlugin>, items: Vec<WireItem>) -> Result<(), String> {
    let (runtime_end, plugin_end) = std::os::unix::net::UnixStream::pair().unwrap();
    runtime_end.set_nonblocking(true).unwrap();
    let mux = Mux::new(tokio::net::UnixStream::from_std(runtime_end).unwrap());
    let (reg_tx, mut reg_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut server = Server::new()
        .register_service(nri_ttrpc::create_runtime(Arc::new(FakeRuntime {
            registered: reg_tx,
        })))
        .add_listener(serve_once(mux.open(RUNTIME_SERVICE_CONN)));
    server.start().await.map_err(|e| e.to_string())?;
    let mut conn = mux.open(PLUGIN_SERVICE_CONN);
    let task = tokio::spawn(sdk::run(
        plugin,
        Options::new(
            "graft",
            "10",
            Transport::PreInstalled(plugin_end.into_raw_fd()),
        ),
    ));
    let limit = Duration::from_secs(5);
    tokio::time::timeout(limit, reg_rx.recv())
        .await
        .map_err(|_| "no registration".to_string())?;
    let configure = nri::ConfigureRequest {
        runtime_name: "containerd".into(),
        runtime_version: "v2.2.7".into(),
        ..Default::default()
    };
    conn.write_all(&ttrpc_request(
        1,
        "Configure",
        configure.write_to_bytes().unwrap(),
        0,
    ))
    .await
    .map_err(|e| e.to_string())?;
    let resp = tokio::time::timeout(limit, response_for(&mut conn, 1))
        .await
        .map_err(|_| "Configure not answered".to_string())??;
    if resp.status.code() != ttrpc::Code::OK {
        return Err(format!("Configure failed: {:?}", resp.status));
    }

    let mut next = 3u32;
    let all_requests = items.iter().all(|i| matches!(i, WireItem::Request { .. }));
    // graft-nri's SDK answers Synchronize before decoding it; one that then does not decode
    // ends the connection, as the runtime ends it after an error reply.
    let may_end = items.iter().any(|i| {
        matches!(i, WireItem::Request { method, payload, .. }
            if METHODS[*method] == "Synchronize"
                && nri::SynchronizeRequest::parse_from_bytes(payload).is_err())
    });
    let closed = |e: std::io::Error| format!("{CLOSED}: {e}");
    let sent = async {
        for item in &items {
            let bytes = match item {
                WireItem::Request {
                    method,
                    payload,
                    timeout_nano,
                } => {
                    next += 2;
                    ttrpc_request(next, METHODS[*method], payload.clone(), *timeout_nano)
                }
                WireItem::Frame {
                    declared,
                    stream,
                    kind,
                    flags,
                    body,
                } => ttrpc_frame(*stream, *kind, *flags, *declared, body),
                WireItem::Bytes(b) => b.clone(),
            };
            conn.write_all(&bytes).await.map_err(closed)?;
        }
        if all_requests {
            {
                // Configure again: a mutated Configure may have set a tiny request timeout.
                let stream = next + 2;
                conn.write_all(&ttrpc_request(
                    stream,
                    "Configure",
                    configure.write_to_bytes().unwrap(),
                    0,
                ))
                .await
                .map_err(closed)?;
                tokio::time::timeout(limit, response_for(&mut conn, stream))
                    .await
                    .map_err(|_| {
                        "the connection stopped answering after malformed payloads".to_string()
                    })??;
                let stream = next + 4;
                let req = nri::CreateContainerRequest {
                    pod: Some(nri::PodSandbox {
                        uid: POD.into(),
                        ..Default::default()
                    })
                    .into(),
                    container: Some(nri::Container {
                        name: "app".into(),
                        ..Default::default()
                    })
                    .into(),
                    ..Default::default()
                };
                conn.write_all(&ttrpc_request(
                    stream,
                    "CreateContainer",
                    req.write_to_bytes().unwrap(),
                    0,
                ))
                .await
                .map_err(closed)?;
                let resp = tokio::time::timeout(limit, response_for(&mut conn, stream))
                    .await
                    .map_err(|_| {
                        "the connection stopped answering after malformed payloads".to_string()
                    })??;
                let created = nri::CreateContainerResponse::parse_from_bytes(&resp.payload)
                    .map_err(|e| format!("CreateContainer answered {:?}: {e}", resp.status))?;
                if created.adjust.linux.devices.len() != 3 {
                    return Err(format!("CreateContainer answered {created:?}"));
                }
            }
        }
        Ok::<(), String>(())
    }
    .await;
    match sent {
        Err(e) if may_end && e.starts_with(CLOSED) => {}
        other => other?,
    }
    drop(conn);
    let _ = tokio::time::timeout(limit, server.shutdown()).await;
    drop(mux);
    match tokio::time::timeout(limit, task).await {
        Err(_) => Err("the plugin did not notice the runtime going away".into()),
        Ok(Err(e)) => Err(format!("the plugin task failed: {e}")),
        Ok(Ok(Ok(()))) => Err("a pre-installed plugin returned Ok".into()),
        Ok(Ok(Err(_))) => Ok(()),
    }
}

#[test]
fn ttrpc_sessions_survive_malformed_input() {
    count_panics();
    let env = env();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(SESSION_THREADS)
        .enable_all()
        .build()
        .unwrap();
    run(200, prop::collection::vec(wire_item(), 0..6), |items| {
        let before = PANICS.load(Ordering::SeqCst);
        let r = rt.block_on(session(env.plugin.clone(), items));
        prop_assert_eq!(PANICS.load(Ordering::SeqCst), before, "something panicked");
        r.map_err(TestCaseError::fail)
    });
}

/// The same session plumbing with only valid requests, as a sanity check of the harness.
#[test]
fn ttrpc_session_harness_works() {
    let env = env();
    let rt = current_thread();
    rt.block_on(session(
        env.plugin.clone(),
        vec![WireItem::Request {
            method: 3,
            payload: nri::CreateContainerRequest::new().write_to_bytes().unwrap(),
            timeout_nano: 0,
        }],
    ))
    .unwrap();
}

/// A Synchronize whose top level scans but whose pods do not decode: the SDK answers it,
/// then ends the connection; the session ends cleanly (no panic, the plugin's `run`
/// returns), as it does when the runtime drops the plugin after an error reply.
#[test]
fn a_synchronize_that_does_not_decode_after_its_answer_ends_the_session_cleanly() {
    let env = env();
    let rt = current_thread();
    let mut payload = vec![0x0a, 0x03, 0xff, 0xff, 0xff];
    payload.extend([0x18, 0x00]);
    assert!(nri::SynchronizeRequest::parse_from_bytes(&payload).is_err());
    rt.block_on(session(
        env.plugin.clone(),
        vec![WireItem::Request {
            method: 1,
            payload,
            timeout_nano: 0,
        }],
    ))
    .unwrap();
}
