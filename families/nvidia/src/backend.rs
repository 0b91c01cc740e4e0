//! The NVIDIA family as one [`Backend`]: its flags, its discovery, its node-side setup
//! (VFIO, time-slicing, dynamic MIG, MPS), graft-hook's install, the MPS shares' restore
//! and GPU health. The cells its parts share (the chosen nvidia-smi, the MIG ledger, the
//! rescan sender) are made and kept here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::coexistence;
use super::devices::{HookConfig, MigLedger, NvidiaConfig, NvidiaDiscovery};
use super::domain::{GateSlot, KubeGate};
use super::driver_files::Roots;
pub use super::flags::NvidiaFlags;
use super::nvml::GpuSelection;
use super::setup::{
    ChrootSmi, MigManager, MpsManager, NvidiaSetup, NvidiaWork, NvmlPersistence, PersistenceMode,
    Untouched, Vfio,
};
use crate::health::classify::parse_xids;
use crate::health::monitor::{self, MonitorConfig};
use graft_driver_core::backend::router::Route;
use graft_driver_core::backend::scan::Discovery;
use graft_driver_core::backend::{Backend, BackendError, Injection, Node, Running};
use graft_driver_core::claims::Core;
use graft_driver_core::daemon::{Daemon, Ends};
use graft_driver_core::model::Kind;

/// The family's name, as `--discovery` spells it.
const NAME: &str = super::setup::FAMILY;
/// The start-up step that installs graft-hook, as [`BackendError::Step`] names it (its
/// failure has an Event of its own).
pub use graft_driver_core::events::node::INSTALLING_HOOK;

/// The discovery's settings from the flags.
fn config(node: &Node, flags: &NvidiaFlags) -> NvidiaConfig {
    let roots = Roots {
        host: node.host_root.clone(),
        driver: flags.nvidia_driver_root.clone(),
    };
    // Picked as graft-nri picks it, so that its policy accepts graft-hook's --ldconfig.
    let ldconfig = flags.nvidia_ldconfig.clone().unwrap_or_else(|| {
        graft_record::policy::default_ldconfig(&roots.driver, |p| roots.visible(p).is_file())
    });
    NvidiaConfig {
        nvml_lib: flags.nvidia_nvml_lib.clone(),
        proc_root: node.proc_root.clone(),
        sys_root: node.sysfs_root.clone(),
        dev_root: node
            .dev_root
            .clone()
            .unwrap_or_else(|| roots.visible(Path::new("/dev"))),
        hook: HookConfig {
            path: flags.nvidia_hook_path.clone(),
            ldconfig,
            params_copy: graft_record::params::params_copy_base(&node.state_dir)
                .display()
                .to_string(),
        },
        driver_copies: Some(graft_record::driver_dir::base(&node.state_dir)),
        imex_channels: flags.nvidia_imex_channels,
        // The chart passes --nvidia-clique-label exactly with ComputeDomains on.
        compute_domains: flags.nvidia_clique_label,
        passthrough: flags.nvidia_passthrough,
        dynamic_mig: flags.nvidia_dynamic_mig.clone(),
        mps: flags.nvidia_mps.clone(),
        time_slicing: flags.nvidia_time_slicing.clone(),
        time_slicing_replicas: flags.nvidia_time_slicing_replicas,
        placement_order: flags.nvidia_placement_order,
        roots,
    }
}

/// The NVIDIA family on this node.
pub struct NvidiaBackend {
    node: Node,
    flags: NvidiaFlags,
    config: NvidiaConfig,
    discovery: Option<Box<dyn Discovery>>,
    /// The MIG instances graft made, shared by discovery and the MIG manager.
    ledger: MigLedger,
    /// libnvidia-ml.so.1 as loaded here; `None` when it was not found at start.
    nvml: Option<PathBuf>,
    informational_xids: BTreeSet<u64>,
    setup: Arc<NvidiaSetup>,
    /// Marks the shares graft-mps serves; restored from the checkpoint at start.
    mps: Option<MpsManager>,
}

impl NvidiaBackend {
    /// Without NVML the backend's scans fail (reported, retried) rather than graft-driver
    /// crash-looping; the other families serve meanwhile.
    pub fn new(node: &Node, flags: &NvidiaFlags) -> Result<Self, BackendError> {
        let config = config(node, flags);
        let ledger = MigLedger::default();
        let discovery = NvidiaDiscovery::unchecked(config.clone()).with_ledger(ledger.clone());
        let smi = discovery.smi_path();
        let nvml = discovery
            .nvml_path()
            .inspect_err(|e| tracing::error!(error = %e, "NVML not found"))
            .ok();
        let informational_xids = parse_xids(&flags.health_informational_xids)
            .map_err(|e| BackendError::step(NAME, "--health-informational-xids", e))?;
        let mig = match (&nvml, &flags.nvidia_dynamic_mig) {
            (Some(lib), d) if *d != GpuSelection::None => Some(MigManager::new(
                lib.clone(),
                node.proc_root.clone(),
                ledger.clone(),
            )),
            _ => None,
        };
        // The daemons are graft-mps's (its own DaemonSet); graft-driver marks the shares.
        let mps = (nvml.is_some() && flags.nvidia_mps != GpuSelection::None)
            .then(|| MpsManager::new(node.state_dir.clone(), crate::setup::DEFAULT_WAIT));
        // Persistence mode is turned off and on around passthrough only.
        let persistence: Box<dyn PersistenceMode> = match (&nvml, flags.nvidia_passthrough) {
            (Some(lib), true) => Box::new(NvmlPersistence { lib: lib.clone() }),
            _ => Box::new(Untouched),
        };
        let wake = node.rescan.clone();
        let setup = NvidiaSetup {
            vfio: Vfio {
                sys: config.sys_root.clone(),
                proc: config.proc_root.clone(),
                timeout: Duration::from_secs(flags.nvidia_vfio_timeout_seconds),
            },
            dev_root: config.dev_root.clone(),
            smi: Box::new(ChrootSmi {
                root: config.roots.visible(&config.roots.driver),
                path: smi,
            }),
            persistence,
            rescan: Box::new(move || {
                let _ = wake.try_send(());
            }),
            mig,
            mps: mps.clone(),
            // The chart passes --nvidia-clique-label exactly with ComputeDomains on.
            domains: GateSlot::new(flags.nvidia_clique_label),
        };
        Ok(NvidiaBackend {
            node: node.clone(),
            flags: flags.clone(),
            config,
            discovery: Some(Box::new(discovery)),
            ledger,
            nvml,
            informational_xids,
            setup: Arc::new(setup),
            mps,
        })
    }

    fn install_hook(&self) -> Result<(), BackendError> {
        // (The step's name is how the HookInstallFailed Event recognises it.)
        let source = match &self.flags.hook_source {
            Some(s) => s.clone(),
            None => std::env::current_exe()
                .map_err(|e| BackendError::step(NAME, "locating graft-driver", e))?
                .with_file_name("graft-hook"),
        };
        let dest = Path::new(&self.flags.nvidia_hook_path);
        let installed = super::hook_install::install(&source, dest, &self.node.host_root)
            .map_err(|e| BackendError::step(NAME, INSTALLING_HOOK, e))?;
        tracing::info!(
            path = %installed.path.display(), sha256 = installed.sha256,
            replaced = installed.changed, "graft-hook verified"
        );
        Ok(())
    }
}

#[async_trait]
impl Backend for NvidiaBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn health_reasons(&self) -> &'static [&'static str] {
        &super::health::classify::REASONS
    }

    fn injection(&self) -> Option<Injection> {
        Some(Injection {
            mount_roots: graft_record::policy::nvidia_mount_roots(&self.flags.nvidia_driver_root),
            ldconfig: self.config.hook.ldconfig.clone(),
        })
    }

    fn before_scan(&mut self, core: &Core) -> Result<(), BackendError> {
        // The MIG instances graft made before a restart are its own, not the operator's:
        // known before the first scan decides which placements to offer.
        let setups = core
            .setups()
            .map_err(|e| BackendError::step(NAME, "reading the checkpoint's MIG instances", e))?;
        let own = NvidiaWork::own(&setups);
        self.ledger.seed(own.iter().filter_map(|w| match w {
            NvidiaWork::Mig {
                gpu_uuid,
                profile,
                start,
                ..
            } => Some((gpu_uuid.as_str(), *profile, *start)),
            _ => None,
        }));
        self.install_hook()
    }

    fn take_discovery(&mut self) -> Option<Box<dyn Discovery>> {
        self.discovery.take()
    }

    fn route(&self) -> Option<Route> {
        Some(Route {
            family: NAME,
            // The family's devices in the core's roles: a GPU is a whole accelerator, a MIG
            // device a partition, an IMEX channel a channel, the place for a ComputeDomain's
            // IMEX daemon a domain slot, a GPU's function for VFIO a passthrough.
            kinds: |k| {
                matches!(
                    k,
                    Kind::Whole
                        | Kind::Partition
                        | Kind::Channel
                        | Kind::DomainSlot
                        | Kind::Passthrough
                )
            },
            unnamed: true,
            setup: self.setup.clone(),
        })
    }

    async fn after_startup(&self, core: Arc<Core>) {
        let Some(m) = self.mps.clone() else { return };
        // graft-mps serves the shares marked: exactly the checkpoint's. A failure leaves the
        // other devices working; the next prepare or unprepare of a share corrects its own.
        let setups = move || {
            core.setups()
                .map(|s| NvidiaWork::own(&s))
                .map_err(|e| e.to_string())
        };
        match tokio::task::spawn_blocking(move || m.restore(setups)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "restoring the MPS shares"),
            Err(e) => tracing::error!(error = %e, "restoring the MPS shares panicked"),
        }
    }

    fn start(&mut self, daemon: &mut Daemon, running: &Running<'_>) -> Result<(), BackendError> {
        // GPUs beside NVIDIA's device plugin: withheld unless the operator allows both.
        if !self.flags.allow_device_plugin_coexistence {
            coexistence::hold_until_looked(running.holds);
            daemon.spawn(
                "device-plugin-guard",
                coexistence::run(
                    running.client.clone(),
                    self.node.node_name.clone(),
                    running.events.clone(),
                    running.holds.clone(),
                    self.flags.device_plugin_resources.clone(),
                ),
            );
        }
        // MPS tenants as taints, so that the scheduler sends other namespaces elsewhere.
        if let Some(mps) = self
            .mps
            .clone()
            .filter(|_| self.flags.nvidia_mps_tenant_taint)
        {
            daemon.spawn(
                "mps-tenants",
                crate::setup::mps_tenants::run(
                    mps,
                    running.inventory.clone(),
                    running.taints.clone(),
                    Duration::from_secs(30),
                ),
            );
        }
        // What each GPU is doing, for the metrics that name the pod using it.
        if let (Some(lib), true) = (self.nvml.clone(), self.flags.nvidia_usage_seconds > 0) {
            daemon.spawn(
                "gpu-usage",
                crate::usage::run(
                    lib,
                    self.config.proc_root.clone(),
                    running.inventory.clone(),
                    running.usage.clone(),
                    Duration::from_secs(self.flags.nvidia_usage_seconds),
                ),
            );
        }
        // ComputeDomain channels ask the API server at prepare, from a blocking thread.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            self.setup.domains.set(Arc::new(KubeGate {
                client: running.client.clone(),
                node: self.node.node_name.clone(),
                home: running.client.default_namespace().to_string(),
                runtime,
                timeout: Duration::from_secs(10),
                wait: Duration::from_secs(self.flags.nvidia_compute_domain_wait_seconds),
            }));
        }
        if self.flags.nvidia_clique_label {
            daemon.spawn(
                "clique-label",
                super::domain::clique_label::run(
                    running.client.clone(),
                    self.node.node_name.clone(),
                    running.inventory.clone(),
                ),
            );
        }
        // Device health: NVML events for GPUs. Without NVML at start nothing runs (the
        // restart once NVML appears starts it).
        let Some(lib) = self.nvml.clone() else {
            return Ok(());
        };
        let flags = &self.flags;
        let config = MonitorConfig {
            nvml_lib: lib,
            informational_xids: self.informational_xids.clone(),
            quiet: (flags.health_recovery_seconds > 0)
                .then(|| Duration::from_secs(flags.health_recovery_seconds)),
            probe_every: Duration::from_secs(flags.health_probe_seconds.max(1)),
            state_dir: self.node.state_dir.clone(),
            boot_id: running.boot_id.to_string(),
        };
        let thread = monitor::spawn(config, running.inventory.clone(), running.health.clone())
            .map_err(|e| BackendError::step(NAME, "starting the GPU health monitor", e))?;
        daemon.watch_thread("gpu-health", Ends::Never, thread);
        daemon.spawn(
            "health-events",
            graft_driver_core::events::health::run(
                running.client.clone(),
                self.node.node_name.clone(),
                self.node.driver_name.clone(),
                self.node.state_dir.clone(),
                running.health.subscribe(),
            ),
        );
        Ok(())
    }

    fn restart_when_up(&self) -> Option<&'static str> {
        self.nvml
            .is_none()
            .then_some("NVML is there now: graft-driver restarts to start GPU health, MIG and MPS")
    }
}
