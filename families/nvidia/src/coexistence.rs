//! NVIDIA's device plugin beside graft on one node: both would hand out the same GPUs. The
//! device plugin advertises its GPUs in the Node's capacity (`nvidia.com/gpu`, time-sliced
//! `nvidia.com/gpu.shared`, MIG's `nvidia.com/mig-<profile>`); while it does, graft
//! withholds its NVIDIA GPUs (full GPUs, MIG devices, VFIO functions) from its
//! ResourceSlices and says so with a Warning Event on the Node, until the resource is gone
//! or the operator says the two are kept apart (`--allow-device-plugin-coexistence`).
//! Until the first look at the Node, GPUs are withheld too: better late than twice.
//!
//! Only GPU resources count: NVIDIA's other operators advertise under the same prefix (the
//! Network Operator's `nvidia.com/hostdev`, RDMA's shared devices), and a NIC plugin beside
//! graft hands out no GPU. A GPU plugin renamed elsewhere is named with
//! `--device-plugin-resources`.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::events::{Event, EventType};
use kube::runtime::{watcher, WatchStreamExt};
use tokio::sync::watch;

use graft_driver_core::events::{node_ref, Poster};
use graft_driver_core::model::{Device, Holds, Kind};

/// What NVIDIA's GPU device plugin advertises: whole GPUs, their time-sliced or MPS
/// replicas under the `.shared` rename, and MIG devices (`mig-<profile>`, also `.shared`).
const GPU_RESOURCES: [&str; 3] = [
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-*",
];
/// The Warning Event's reason.
pub const BESIDE: &str = "DevicePluginBesideGraft";
/// The Normal Event's reason when the device plugin's resources are gone.
pub const GONE: &str = "DevicePluginGone";

/// What the guard knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Not looked yet.
    Unknown,
    /// No device plugin resource on the Node: publish everything.
    Clear,
    /// These device plugin resources are on the Node: withhold the GPUs.
    Withhold(Vec<String>),
}

impl Verdict {
    /// Whether a device of `kind` is published under this verdict.
    pub fn publishes(&self, kind: Kind) -> bool {
        !is_gpu(kind) || *self == Verdict::Clear
    }

    /// This verdict as the family's hold on the slices; whether that changed them.
    fn hold(&self, holds: &mut Holds) -> bool {
        match self {
            Verdict::Clear => holds.release(FAMILY),
            Verdict::Unknown | Verdict::Withhold(_) => holds.hold(FAMILY, gpu_device),
        }
    }
}

/// The family's name, as its hold on the slices names it.
const FAMILY: &str = crate::setup::FAMILY;

/// The nvidia family's GPUs, MIG devices and VFIO functions.
fn is_gpu(kind: Kind) -> bool {
    kind.is_accelerator() || kind == Kind::Passthrough
}

fn gpu_device(d: &Device) -> bool {
    is_gpu(d.kind)
}

/// Holds the GPUs back until the guard's first look at the Node ([`run`]).
pub fn hold_until_looked(holds: &watch::Sender<Holds>) {
    holds.send_if_modified(|h| Verdict::Unknown.hold(h));
}

/// Whether `name` matches `pattern`: the same name, or the pattern's prefix when it ends
/// in `*`.
fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

/// Whether a Node resource means a GPU device plugin runs there: one of NVIDIA's GPU
/// resources, or one of `extra` (names, or prefixes ending in `*`).
pub fn is_gpu_plugin_resource(name: &str, extra: &[String]) -> bool {
    GPU_RESOURCES.iter().any(|p| matches(p, name)) || extra.iter().any(|p| matches(p, name))
}

/// The GPU device plugin resources the Node advertises with a non-zero quantity.
pub fn plugin_resources(node: &Node, extra: &[String]) -> Vec<String> {
    let status = node.status.as_ref();
    let mut found: Vec<String> = [
        status.and_then(|s| s.capacity.as_ref()),
        status.and_then(|s| s.allocatable.as_ref()),
    ]
    .into_iter()
    .flatten()
    .flat_map(|m| m.iter())
    .filter(|(k, q)| is_gpu_plugin_resource(k, extra) && q.0.trim() != "0")
    .map(|(k, _)| k.clone())
    .collect();
    found.sort();
    found.dedup();
    found
}

fn event(v: &Verdict) -> Option<Event> {
    let (type_, reason, note) = match v {
        Verdict::Withhold(r) => (
            EventType::Warning,
            BESIDE,
            format!(
                "a device plugin advertises {} on this node: graft withholds its NVIDIA GPUs so \
                 that no GPU is handed out twice (remove the device plugin from graft's GPU \
                 nodes, or set nvidia.allowDevicePluginCoexistence if they are kept apart)",
                r.join(", ")
            ),
        ),
        Verdict::Clear => (
            EventType::Normal,
            GONE,
            "no device plugin resource on this node any more: graft publishes its GPUs".into(),
        ),
        Verdict::Unknown => return None,
    };
    Some(Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "CheckDevicePlugin".into(),
        secondary: None,
    })
}

/// Watches this Node (a field selector on its name, so the API server sends this node's
/// changes alone: one event per status update, about one each 5 min from the kubelet,
/// where a poll cost a GET every 30 s) and keeps the family's hold in `holds` up to date;
/// an Event when GPUs are withheld, and when they are published again after that.
pub async fn run(
    client: kube::Client,
    node: String,
    poster: Poster,
    holds: watch::Sender<Holds>,
    extra: Vec<String>,
) {
    let nodes: Api<Node> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={node}"));
    let stream = watcher(nodes, config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut before = Verdict::Unknown;
    let mut failing = false;
    while let Some(ev) = stream.next().await {
        let n = match ev {
            Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => n,
            Ok(_) => continue,
            Err(e) => {
                if !std::mem::replace(&mut failing, true) {
                    tracing::warn!(error = %e, "watching this Node for device plugin resources");
                }
                continue;
            }
        };
        failing = false;
        let found = plugin_resources(&n, &extra);
        let now = if found.is_empty() {
            Verdict::Clear
        } else {
            Verdict::Withhold(found)
        };
        holds.send_if_modified(|h| now.hold(h));
        let was = std::mem::replace(&mut before, now.clone());
        let worth = match (&was, &now) {
            (Verdict::Unknown, Verdict::Clear) => false,
            (b, n) => b != n,
        };
        if worth {
            if let Some(ev) = event(&now) {
                tracing::warn!(verdict = ?now, "device plugin beside graft");
                poster.post(ev, node_ref(&node));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(capacity: &[(&str, &str)]) -> Node {
        let cap: serde_json::Map<String, serde_json::Value> = capacity
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
            .collect();
        serde_json::from_value(serde_json::json!({"metadata": {"name": "n"},
            "status": {"capacity": cap, "allocatable": cap}}))
        .unwrap()
    }

    #[test]
    fn only_nonzero_gpu_plugin_resources_count() {
        let none: &[String] = &[];
        assert!(plugin_resources(&node(&[("cpu", "4"), ("graft.dev/fuse", "1")]), none).is_empty());
        assert!(plugin_resources(&node(&[("nvidia.com/gpu", "0")]), none).is_empty());
        assert_eq!(
            plugin_resources(
                &node(&[
                    ("nvidia.com/gpu", "8"),
                    ("nvidia.com/mig-1g.10gb", "7"),
                    ("nvidia.com/gpu.shared", "32"),
                    ("nvidia.com/mig-1g.10gb.shared", "14"),
                ]),
                none
            ),
            [
                "nvidia.com/gpu",
                "nvidia.com/gpu.shared",
                "nvidia.com/mig-1g.10gb",
                "nvidia.com/mig-1g.10gb.shared"
            ]
        );
    }

    #[test]
    fn network_operator_resources_withhold_nothing_unless_named() {
        let none: &[String] = &[];
        let nics = node(&[
            ("nvidia.com/hostdev", "4"),
            ("nvidia.com/rdma_shared_device_a", "63"),
            ("nvidia.com/sriov_rdma", "8"),
            ("nvidia.com/gpux", "1"),
        ]);
        assert!(plugin_resources(&nics, none).is_empty());
        // A GPU plugin that renamed its resource is named by the operator, or a prefix.
        let extra = ["nvidia.com/gpux".to_string(), "example.com/gpu-*".into()];
        assert_eq!(plugin_resources(&nics, &extra), ["nvidia.com/gpux"]);
        assert!(is_gpu_plugin_resource("example.com/gpu-a100", &extra));
        assert!(!is_gpu_plugin_resource("example.com/gpu", &extra));
    }

    #[test]
    fn gpus_are_published_only_when_clear() {
        let w = Verdict::Withhold(vec!["nvidia.com/gpu".into()]);
        for v in [&Verdict::Unknown, &w] {
            assert!(
                !v.publishes(Kind::Whole)
                    && !v.publishes(Kind::Partition)
                    && !v.publishes(Kind::Passthrough)
            );
            assert!(v.publishes(Kind::Char) && v.publishes(Kind::Channel));
        }
        assert!(Verdict::Clear.publishes(Kind::Whole));
        let ev = event(&w).unwrap();
        assert_eq!((ev.type_, ev.reason.as_str()), (EventType::Warning, BESIDE));
        assert!(ev.note.unwrap().contains("nvidia.com/gpu"));
        assert!(event(&Verdict::Unknown).is_none());
    }

    #[test]
    fn the_hold_follows_the_verdict() {
        let (tx, rx) = watch::channel(Holds::default());
        let gpu = Device::new("gpu-0", Kind::Whole);
        let vfio = Device::new("vfio-0", Kind::Passthrough);
        let fuse = Device::new("fuse", Kind::Char);
        hold_until_looked(&tx);
        let mut holds = rx.borrow().clone();
        assert!(!holds.publishes(&gpu) && !holds.publishes(&vfio) && holds.publishes(&fuse));
        // Still withheld once seen: no change for the publisher to act on.
        assert!(!Verdict::Withhold(vec!["nvidia.com/gpu".into()]).hold(&mut holds));
        assert!(Verdict::Clear.hold(&mut holds));
        assert!(holds.publishes(&gpu) && holds.publishes(&vfio));
        assert!(!Verdict::Clear.hold(&mut holds));
        assert_eq!(format!("{holds:?}"), "{}");
    }
}
