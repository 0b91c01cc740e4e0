use std::sync::{Arc, Mutex};

use super::*;
use crate::error::DriverError;
use crate::model::Kind;

/// A backend whose next scan the test sets.
struct Scripted {
    name: &'static str,
    next: Arc<Mutex<Result<Vec<&'static str>, String>>>,
    unavailable: Arc<Mutex<Vec<Unavailable>>>,
}

impl Discovery for Scripted {
    fn name(&self) -> &'static str {
        self.name
    }
    fn discover(&self) -> crate::error::Result<Vec<Device>> {
        match &*self.next.lock().unwrap() {
            Ok(names) => Ok(names.iter().map(|n| dev(n)).collect()),
            Err(e) => Err(DriverError::Discovery {
                backend: self.name,
                reason: e.clone(),
            }),
        }
    }
    fn unavailable(&self) -> Vec<Unavailable> {
        self.unavailable.lock().unwrap().clone()
    }
}

fn dev(name: &str) -> Device {
    Device::new(name, Kind::Char)
}

type Next = Arc<Mutex<Result<Vec<&'static str>, String>>>;

fn backend(
    name: &'static str,
    first: Result<Vec<&'static str>, String>,
) -> (Box<dyn Discovery>, Next, Arc<Mutex<Vec<Unavailable>>>) {
    let next = Arc::new(Mutex::new(first));
    let unavailable = Arc::new(Mutex::new(Vec::new()));
    (
        Box::new(Scripted {
            name,
            next: next.clone(),
            unavailable: unavailable.clone(),
        }),
        next,
        unavailable,
    )
}

fn names(inv: &Inventory) -> Vec<&str> {
    inv.devices().iter().map(|d| d.name.as_str()).collect()
}

fn at(s: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(s)
}

#[test]
fn a_failing_backend_keeps_its_devices_and_never_takes_the_others() {
    let (char_b, char_next, _) = backend("char", Ok(vec!["fuse", "tun"]));
    let (gpu_b, gpu_next, gpu_unavailable) = backend("nvidia", Err("NVML not found".into()));
    let backends = vec![char_b, gpu_b];
    let mut inv = Inventory::new(&backends);

    // At start: nvidia fails with nothing to keep; char is published.
    let s = inv.scan(&backends, at(10));
    assert_eq!(names(&inv), ["fuse", "tun"]);
    assert_eq!(s.failed, ["nvidia"]);
    assert_eq!(
        s.changes,
        [Change::Failed {
            backend: "nvidia",
            error: "nvidia discovery: NVML not found".into(),
            kept: 0,
            config: false,
        }]
    );
    assert!(inv.degraded());
    assert_eq!(inv.up(), [("char", true), ("nvidia", false)]);
    assert_eq!(inv.failing()[0].1.since, at(10));

    // Still failing: counted, but no new change; since stays.
    let s = inv.scan(&backends, at(15));
    assert!(s.changes.is_empty());
    assert_eq!(s.failed, ["nvidia"]);
    assert_eq!(inv.failing()[0].1.since, at(10));

    // It works: recovered after 10 s.
    *gpu_next.lock().unwrap() = Ok(vec!["gpu-0", "gpu-1"]);
    let s = inv.scan(&backends, at(20));
    assert_eq!(
        s.changes,
        [Change::Recovered {
            backend: "nvidia",
            failed_for: Duration::from_secs(10)
        }]
    );
    // Backend order, each backend's own order: what the scheduler walks.
    assert_eq!(names(&inv), ["fuse", "tun", "gpu-0", "gpu-1"]);
    assert!(!inv.degraded());

    // It fails again: its last devices stay; the other backend's change goes through.
    *gpu_next.lock().unwrap() = Err("NVML: Unknown Error".into());
    *char_next.lock().unwrap() = Ok(vec!["fuse"]);
    let s = inv.scan(&backends, at(30));
    assert!(matches!(&s.changes[..], [Change::Failed { kept: 2, .. }]));
    assert_eq!(names(&inv), ["fuse", "gpu-0", "gpu-1"]);

    // A GPU left out is reported once, and when it comes back.
    *gpu_next.lock().unwrap() = Ok(vec!["gpu-0"]);
    let part = Unavailable {
        key: "nvidia-gpu-index-1".into(),
        reason: "GpuUnavailable",
        message: "GPU at NVML index 1: GPU is lost".into(),
    };
    *gpu_unavailable.lock().unwrap() = vec![part.clone()];
    let s = inv.scan(&backends, at(40));
    assert!(s.changes.contains(&Change::Unavailable {
        backend: "nvidia",
        part: part.clone()
    }));
    assert!(inv.degraded());
    let s = inv.scan(&backends, at(45));
    assert!(s.changes.is_empty(), "{:?}", s.changes);
    gpu_unavailable.lock().unwrap().clear();
    let s = inv.scan(&backends, at(50));
    assert_eq!(
        s.changes,
        [Change::Available {
            backend: "nvidia",
            key: "nvidia-gpu-index-1".into()
        }]
    );
}

#[test]
fn a_name_collision_drops_the_later_backends_device() {
    let (a, _, _) = backend("char", Ok(vec!["fuse", "x"]));
    let (b, _, _) = backend("files", Ok(vec!["x", "y"]));
    let backends = vec![a, b];
    let mut inv = Inventory::new(&backends);
    let s = inv.scan(&backends, at(0));
    assert!(s.failed.is_empty());
    assert_eq!(names(&inv), ["fuse", "x", "y"]);
    assert_eq!(inv.devices()[1].kind, Kind::Char);
}
