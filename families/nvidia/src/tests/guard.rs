//! The device plugin guard is the NVIDIA family's own task: its backend starts it unless the
//! operator allows both, and holds the GPUs back before the slices are first published.

use std::path::Path;
use std::sync::Arc;

use clap::Parser;
use tokio::sync::{mpsc, watch};

use crate::backend::NvidiaBackend;
use crate::flags::NvidiaFlags;
use graft_driver_core::backend::{Backend, Node, Running};
use graft_driver_core::daemon::Daemon;
use graft_driver_core::events::Poster;
use graft_driver_core::health::HealthReport;
use graft_driver_core::metrics::DriverMetrics;
use graft_driver_core::model::{Device, FamilyTaints, Holds, Kind};

#[derive(clap::Parser)]
struct Flags {
    #[command(flatten)]
    nvidia: NvidiaFlags,
}

fn node(dir: &Path) -> Node {
    Node {
        node_name: "node-a".into(),
        driver_name: "graft.dev".into(),
        state_dir: dir.join("state"),
        host_root: dir.to_path_buf(),
        sysfs_root: dir.join("sys"),
        proc_root: dir.join("proc"),
        dev_root: Some(dir.join("dev")),
        device_config: dir.join("devices.toml"),
        allowed_mount_roots: Vec::new(),
        metrics: Arc::new(DriverMetrics::default()),
        rescan: mpsc::channel(1).0,
    }
}

#[tokio::test]
async fn the_guard_holds_the_gpus_back_unless_both_are_allowed() {
    let allow = ["graft-driver", "--allow-device-plugin-coexistence"];
    for (args, held) in [(&allow[..1], true), (&allow[..], false)] {
        let dir = tempfile::tempdir().unwrap();
        let node = node(dir.path());
        let flags = Flags::parse_from(args).nvidia;
        let mut backend = NvidiaBackend::new(&node, &flags).unwrap();
        // Never reached: the guard's first look fails and it keeps the GPUs held.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let (holds, seen) = watch::channel(Holds::default());
        let (health, _) = watch::channel(HealthReport::default());
        let (taints, _) = watch::channel(FamilyTaints::default());
        let (usage, _) = watch::channel(Default::default());
        let (events, _posted) = Poster::channel(4);
        let mut daemon = Daemon::new();
        let running = Running {
            client: kube::Client::try_from(config).unwrap(),
            node: &node,
            boot_id: "boot-1",
            inventory: watch::channel(Vec::new()).1,
            health: &health,
            holds: &holds,
            taints: &taints,
            events: &events,
            usage: &usage,
        };
        backend.start(&mut daemon, &running).unwrap();
        let gpu = Device::new("gpu-0", Kind::Whole);
        assert_eq!(!seen.borrow().publishes(&gpu), held, "{args:?}");
        assert!(seen.borrow().publishes(&Device::new("fuse", Kind::Char)));
    }
}
