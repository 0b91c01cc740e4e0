//! The steps of graft-driver's start-up that stand on their own: the families opened and
//! the core made before the first scan, the first scan, a failure told on the Node, and
//! the daemon that names each task to the watch.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use graft_driver::backend::{Backend, Node};
use graft_driver::claims::Core;
use graft_driver::daemon::{Daemon, Ends};
use graft_driver::discovery::inventory::{Change, Inventory};
use graft_driver::discovery::report;
use graft_driver::discovery::Discovery;
use graft_driver::events::node as node_events;
use graft_driver::inotify;
use graft_driver::metrics::DriverMetrics;
use graft_driver::model::Device;
use graft_record::InjectionPolicy;

use super::seams::{Families, NodeEvents, Point, World};
use crate::args::Args;

/// What every family may need of the node and the driver, from the flags; `rescan` asks
/// for a rescan.
pub fn node(
    args: &Args,
    metrics: &Arc<DriverMetrics>,
    rescan: tokio::sync::mpsc::Sender<()>,
) -> Node {
    Node {
        node_name: args.node_name.clone(),
        driver_name: args.driver_name.clone(),
        state_dir: args.state_dir.clone(),
        host_root: args.host_root.clone(),
        sysfs_root: args.sysfs_root.clone(),
        proc_root: args.proc_root.clone(),
        dev_root: args.dev_root.clone(),
        device_config: args.device_config.clone(),
        allowed_mount_roots: args.allowed_mount_roots.clone(),
        metrics: metrics.clone(),
        rescan,
    }
}

/// The families opened, graft-nri's injection policy built from them, the core made with
/// it, and each family's work before the first scan done. A family that fails to open or
/// to do that work is told on the Node (`events`) before its error is returned.
pub async fn families(
    world: &dyn World,
    args: &Args,
    node: &Node,
    boot_id: &str,
    events: &dyn NodeEvents,
) -> anyhow::Result<(Vec<Box<dyn Backend>>, Core)> {
    let mut backends = match open(args, node, world) {
        Ok(b) => b,
        Err(e) => return Err(told(events, e).await),
    };
    let policy = policy(args, &backends).context(
        "the injection policy (--nvidia-hook-path, --allowed-mount-roots, --nvidia-ldconfig)",
    )?;
    tracing::info!(mount_roots = ?policy.mount_roots(), hook = policy.hook_path(), "injection policy");
    let core = Core::new(
        &args.driver_name,
        &args.node_name,
        args.state_dir.clone(),
        boot_id,
    )?
    .with_policy(policy)
    .with_opaque(graft_driver::families::opaque());
    world.at(Point::Core);
    for b in &mut backends {
        if let Err(e) = b.before_scan(&core) {
            return Err(told(events, e.into()).await);
        }
    }
    Ok((backends, core))
}

/// `e`, after its Event on the Node when it is one an operator fixes on the node
/// (devices.toml, graft-hook's install).
pub async fn told(events: &dyn NodeEvents, e: anyhow::Error) -> anyhow::Error {
    if let Some(ev) = node_events::startup_failure(e.as_ref()) {
        events.before_exit(ev).await;
    }
    e
}

/// The families `--discovery` names, each once, in its order.
fn open(
    args: &Args,
    node: &Node,
    families: &dyn Families,
) -> anyhow::Result<Vec<Box<dyn Backend>>> {
    let mut out: Vec<Box<dyn Backend>> = Vec::new();
    for &family in &args.discovery {
        if out.iter().any(|b| b.name() == family.name()) {
            continue;
        }
        out.push(families.open(family, node, &args.backends)?);
    }
    if out.is_empty() {
        bail!("--discovery: no backend selected");
    }
    Ok(out)
}

/// graft-nri's injection policy: the common roots, and what the families add.
fn policy(
    args: &Args,
    backends: &[Box<dyn Backend>],
) -> Result<InjectionPolicy, graft_record::InvalidRecord> {
    let injections: Vec<_> = backends.iter().filter_map(|b| b.injection()).collect();
    let family_roots: Vec<String> = injections
        .iter()
        .flat_map(|i| i.mount_roots.iter().cloned())
        .collect();
    let policy = InjectionPolicy::for_node(
        &args.state_dir,
        &args.backends.nvidia.nvidia_hook_path,
        &family_roots,
        &args.allowed_mount_roots,
    )?;
    // One ldconfig: graft-hook's `--ldconfig` names one (only NVIDIA asks for it today).
    match injections.first() {
        Some(i) => policy.with_ldconfig(&i.ldconfig),
        None => Ok(policy),
    }
}

/// The first scan, over the discoveries taken from the families.
pub struct FirstScan {
    /// Each family's discovery, once taken.
    pub discoveries: Vec<Box<dyn Discovery>>,
    /// The inventory the rescans go on with.
    pub inventory: Inventory,
    /// What the scan found changed (backends failing, devices left out): for the Node.
    pub changes: Vec<Change>,
    /// The node's devices.
    pub devices: Vec<Device>,
}

impl FirstScan {
    /// Scans once. Never fatal: a failing backend is reported and retried, the others are
    /// published.
    pub fn of(backends: &mut [Box<dyn Backend>], metrics: &DriverMetrics) -> Self {
        let discoveries: Vec<Box<dyn Discovery>> = backends
            .iter_mut()
            .filter_map(|b| b.take_discovery())
            .collect();
        let mut inventory = Inventory::new(&discoveries);
        let scan = inventory.scan(&discoveries, std::time::SystemTime::now());
        report::record(&scan, &inventory, metrics);
        let devices = inventory.devices().to_vec();
        tracing::info!(devices = devices.len(), "discovered devices");
        FirstScan {
            discoveries,
            inventory,
            changes: scan.changes,
            devices,
        }
    }
}

/// graft-driver's daemon, telling the world each task of its own as it starts.
pub struct Tasks<'w> {
    /// The daemon; the families start their own tasks on it.
    pub daemon: Daemon,
    world: &'w dyn World,
}

impl<'w> Tasks<'w> {
    /// `daemon`, watched by `world`.
    pub fn new(daemon: Daemon, world: &'w dyn World) -> Self {
        Tasks { daemon, world }
    }

    /// Runs `task` as the daemon's task `name`.
    pub fn spawn(&mut self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        self.world.at(Point::Task(name));
        self.daemon.spawn(name, task);
    }

    /// Rescans on changes in the watched directories: an inotify thread wakes the rescan
    /// task.
    pub fn watch_changes(
        &mut self,
        discoveries: &Arc<Vec<Box<dyn Discovery>>>,
        wake: tokio::sync::mpsc::Sender<()>,
    ) {
        let watched = Arc::clone(discoveries);
        let watch_paths =
            move || -> Vec<PathBuf> { watched.iter().flat_map(|b| b.watch_paths()).collect() };
        match inotify::watcher_thread(watch_paths, wake) {
            Ok((n, thread)) => {
                tracing::debug!(directories = n, "watching for device changes");
                // A failed read leaves the periodic rescans: logged there, not a failure.
                self.world.at(Point::Task("inotify"));
                self.daemon.watch_thread("inotify", Ends::MayReturn, thread);
            }
            Err(e) => tracing::warn!(error = %e, "no change notification; periodic rescans only"),
        }
    }
}
