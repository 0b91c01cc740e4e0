//! What a device family is to graft-driver's assembly: the [`Backend`] trait and what it
//! is given and gives back. Imports nothing of the families themselves; the registry that
//! knows them is graft-driver's `families`.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::{mpsc, watch};

use super::scan::Discovery;
use crate::claims::Core;
use crate::daemon::Daemon;
pub use crate::error::BackendError;
use crate::events::Poster;
use crate::health::HealthReport;
use crate::metrics::DriverMetrics;
use crate::model::{Device, FamilyTaints, Holds};

/// What every family may need of the node and the driver.
#[derive(Clone)]
pub struct Node {
    /// This node's name: the pool its devices are published in.
    pub node_name: String,
    /// The DRA driver name graft registers under.
    pub driver_name: String,
    /// graft's state directory (records, checkpoint, graft-nri's status).
    pub state_dir: PathBuf,
    /// Where the host's root is visible here.
    pub host_root: PathBuf,
    /// The host's /sys and /proc as seen here.
    pub sysfs_root: PathBuf,
    /// The host's /proc as seen here.
    pub proc_root: PathBuf,
    /// The host's /dev as seen here; `None`: `dev` below the host root.
    pub dev_root: Option<PathBuf>,
    /// The devices config (the char and files families).
    pub device_config: PathBuf,
    /// Host directories mount sources may come from besides the defaults.
    pub allowed_mount_roots: Vec<String>,
    /// graft-driver's metrics (a family may keep its own counts there).
    pub metrics: Arc<DriverMetrics>,
    /// Asks for a rescan: a setup that changed what the node offers.
    pub rescan: mpsc::Sender<()>,
}

/// What a family adds to the injection policy: the host directories its containers' files
/// are mounted from, and the ldconfig graft-hook runs for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injection {
    /// Allowed mount roots, as host paths.
    pub mount_roots: Vec<String>,
    /// Host path of the ldconfig graft-hook runs.
    pub ldconfig: String,
}

/// What the long-running tasks of a family get once the node's devices are published.
pub struct Running<'a> {
    /// The API server (Events, taints).
    pub client: kube::Client,
    /// What every family may need of the node and the driver.
    pub node: &'a Node,
    /// This boot's id: state from another boot has seen a reset.
    pub boot_id: &'a str,
    /// The node's devices after each scan.
    pub inventory: watch::Receiver<Vec<Device>>,
    /// Where device health goes (ResourceSlice taints, the kubelet's stream).
    pub health: &'a watch::Sender<HealthReport>,
    /// The devices held back from the ResourceSlices: a family that must hold some back
    /// sets its hold in `start`, before the first publication, and changes only its own.
    pub holds: &'a watch::Sender<Holds>,
    /// The taints a family puts on its own devices (NVIDIA: an MPS GPU's tenant); a family
    /// changes only its own ([`FamilyTaints::set`]).
    pub taints: &'a watch::Sender<FamilyTaints>,
    /// The Node's Events.
    pub events: &'a Poster,
    /// Where a family reports what it measured of its devices (NVIDIA: NVML's
    /// utilisation, memory and power), for the metrics that name the pod using each.
    pub usage: &'a watch::Sender<crate::usage::UsageReport>,
}

/// A device family (the port every family implements). The assembly calls these in this order: [`Backend::injection`],
/// [`Backend::before_scan`], [`Backend::take_discovery`] and [`Backend::route`],
/// [`Backend::after_startup`] (the checkpoint settled), [`Backend::start`].
#[async_trait]
pub trait Backend: Send + Sync {
    /// The family's name, as `--discovery` spells it.
    fn name(&self) -> &'static str;
    /// The reasons its health monitor gives a device (besides `xid-<n>`), each its own
    /// `kind` of `graft_driver_health_events_total`: the metric's labels stay a closed set
    /// that the families, not the core, spell.
    fn health_reasons(&self) -> &'static [&'static str] {
        &[]
    }
    /// What it adds to graft-nri's policy, if anything.
    fn injection(&self) -> Option<Injection> {
        None
    }
    /// Work before the first scan, with the checkpoint readable (NVIDIA: learns the MIG
    /// instances graft made, installs graft-hook).
    fn before_scan(&mut self, _core: &Core) -> Result<(), BackendError> {
        Ok(())
    }
    /// Its discovery, handed to the inventory once.
    fn take_discovery(&mut self) -> Option<Box<dyn Discovery>>;
    /// Its node-side setup, and what it answers for; `None`: its devices need none.
    fn route(&self) -> Option<super::router::Route> {
        None
    }
    /// Work once the checkpoint is settled (NVIDIA: marks the MPS shares it holds).
    async fn after_startup(&self, _core: Arc<Core>) {}
    /// Starts its long-running tasks (NVIDIA: GPU health) as tasks of `daemon`.
    fn start(&mut self, _daemon: &mut Daemon, _running: &Running<'_>) -> Result<(), BackendError> {
        Ok(())
    }
    /// When its discovery could not start everything (NVML missing): what to log when a
    /// later scan of it works, after which graft-driver restarts once to start the rest.
    fn restart_when_up(&self) -> Option<&'static str> {
        None
    }
}
