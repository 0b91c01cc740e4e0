//! A device family as one piece: its discovery, its node-side setup, what it adds to
//! graft-nri's policy, its start-up work and its long-running tasks. graft-driver's
//! assembly asks each [`Backend`] for these at the right point of its start-up, and
//! [`router::Router`] sends each setup call to the family that owns the device or setup.
//! A family is chosen with `--discovery` ([`Family`]); see the checklist in
//! [`crate::discovery`] for what a new one touches.

pub mod router;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::{mpsc, watch};

use crate::core::Core;
use crate::daemon::Daemon;
use crate::discovery::char::backend::CharBackend;
use crate::discovery::files::backend::FilesBackend;
use crate::discovery::nvidia::backend::{NvidiaBackend, NvidiaFlags};
use crate::discovery::{Device, Discovery};
use crate::health::HealthReport;
use crate::metrics::DriverMetrics;

/// A device family graft-driver can serve (`--discovery`, comma separated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Family {
    /// Device nodes listed in the devices config.
    Char,
    /// Entries of served directories listed in the devices config.
    Files,
    /// NVIDIA GPUs, MIG devices, IMEX channels, VFIO passthrough.
    Nvidia,
}

impl Family {
    /// The family's name: its `--discovery` spelling and its discovery's name.
    pub fn name(self) -> &'static str {
        match self {
            Family::Char => "char",
            Family::Files => "files",
            Family::Nvidia => "nvidia",
        }
    }

    /// One name of `--discovery`'s list; blanks around it are allowed.
    pub fn parse(s: &str) -> Result<Family, String> {
        let s = s.trim();
        <Family as clap::ValueEnum>::from_str(s, false)
            .map_err(|_| format!("unknown backend {s:?} (known: char, files, nvidia)"))
    }

    /// The family's backend, from the node's settings and the flags.
    pub fn open(self, node: &Node, flags: &Flags) -> Result<Box<dyn Backend>, BackendError> {
        Ok(match self {
            Family::Char => Box::new(CharBackend::new(node)?),
            Family::Files => Box::new(FilesBackend::new(node)?),
            Family::Nvidia => Box::new(NvidiaBackend::new(node, &flags.nvidia)?),
        })
    }
}

/// The flags of the families that have their own (each group a family's).
#[derive(Debug, Clone, clap::Args)]
pub struct Flags {
    /// `--nvidia-*` and the GPU health flags.
    #[command(flatten)]
    pub nvidia: NvidiaFlags,
}

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

/// What a family adds to graft-nri's injection policy: a driver installation whose files
/// containers get, and the ldconfig graft-hook runs for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injection {
    /// As a host path.
    pub driver_root: PathBuf,
    pub ldconfig: String,
}

/// What the long-running tasks of a family get once the node's devices are published.
pub struct Running<'a> {
    /// The API server (Events, taints).
    pub client: kube::Client,
    pub node: &'a Node,
    /// This boot's id: state from another boot has seen a reset.
    pub boot_id: &'a str,
    /// The node's devices after each scan.
    pub inventory: watch::Receiver<Vec<Device>>,
    /// Where device health goes (ResourceSlice taints, the kubelet's stream).
    pub health: &'a watch::Sender<HealthReport>,
}

/// Why a family could not be opened or started.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A family's discovery could not be made (its config is unreadable or invalid).
    #[error(transparent)]
    Discovery(#[from] crate::error::DriverError),
    /// A step of the family's start failed (the message is the step, as the log's chain
    /// shows it above its cause).
    #[error("{what}")]
    Step {
        family: &'static str,
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl BackendError {
    /// `family`'s step `what` failed with `source`.
    pub fn step(
        family: Family,
        what: &'static str,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        BackendError::Step {
            family: family.name(),
            what,
            source: source.into(),
        }
    }
}

/// A device family. The assembly calls these in this order: [`Backend::injection`],
/// [`Backend::before_scan`], [`Backend::take_discovery`] and [`Backend::route`],
/// [`Backend::after_startup`] (the checkpoint settled), [`Backend::start`].
#[async_trait]
pub trait Backend: Send + Sync {
    /// Which family it is.
    fn family(&self) -> Family;
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
    fn route(&self) -> Option<router::Route> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_parse_as_discovery_always_took_them() {
        assert_eq!(Family::parse("nvidia"), Ok(Family::Nvidia));
        assert_eq!(Family::parse(" files "), Ok(Family::Files));
        assert_eq!(Family::parse("char"), Ok(Family::Char));
        let err = Family::parse("gpu").unwrap_err();
        assert_eq!(err, "unknown backend \"gpu\" (known: char, files, nvidia)");
        assert!(Family::parse("").is_err());
        for f in [Family::Char, Family::Files, Family::Nvidia] {
            assert_eq!(Family::parse(f.name()), Ok(f));
        }
    }
}
