//! The NVIDIA family's flags (`--nvidia-*`, GPU health, the device plugin guard), flattened
//! into graft-driver's by the registry.

use std::path::PathBuf;

use super::devices::PlacementOrder;
use super::nvml::GpuSelection;

/// The NVIDIA family's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct NvidiaFlags {
    /// Root of the NVIDIA driver installation, as a host path: `/`, or
    /// `/run/nvidia/driver` with a driver container (nvidia backend).
    #[arg(long, env = "GRAFT_NVIDIA_DRIVER_ROOT", default_value = "/")]
    pub nvidia_driver_root: PathBuf,
    /// libnvidia-ml.so.1 as a path inside the driver root (default: searched).
    #[arg(long, env = "GRAFT_NVIDIA_NVML_LIB")]
    pub nvidia_nvml_lib: Option<String>,
    /// Host path of graft-hook; the driver installs its own copy there at start.
    #[arg(
        long,
        env = "GRAFT_NVIDIA_HOOK_PATH",
        default_value = "/var/lib/graft/bin/graft-hook"
    )]
    pub nvidia_hook_path: String,
    /// Host path of the ldconfig that update-ldcache runs (default: the driver root's, else
    /// the host's).
    #[arg(long, env = "GRAFT_NVIDIA_LDCONFIG")]
    pub nvidia_ldconfig: Option<String>,
    /// The graft-hook to install (default: `graft-hook` next to this binary). It must be a
    /// static executable.
    #[arg(long, env = "GRAFT_HOOK_SOURCE")]
    pub hook_source: Option<PathBuf>,
    /// IMEX channels offered when the node's GPUs are in an NVLink fabric clique.
    #[arg(long, env = "GRAFT_NVIDIA_IMEX_CHANNELS", default_value_t = 1)]
    pub nvidia_imex_channels: u32,
    /// Seconds a ComputeDomain channel's prepare waits for its domain to be Ready on this
    /// node before it refuses (the kubelet then retries a minute or more later); keep it
    /// well inside the kubelet's deadline for the call.
    #[arg(
        long,
        env = "GRAFT_NVIDIA_COMPUTE_DOMAIN_WAIT_SECONDS",
        default_value_t = 25
    )]
    pub nvidia_compute_domain_wait_seconds: u64,
    /// Label the node with its NVLink clique (`resource.graft.dev/clique`); needs the right
    /// to patch its Node, which the chart grants with ComputeDomains on.
    #[arg(long, env = "GRAFT_NVIDIA_CLIQUE_LABEL")]
    pub nvidia_clique_label: bool,
    /// Offer GPUs for VFIO passthrough (rebound to vfio-pci while prepared).
    #[arg(long, env = "GRAFT_NVIDIA_PASSTHROUGH")]
    pub nvidia_passthrough: bool,
    /// MIG-enabled GPUs whose MIG instances graft makes itself when a claim is prepared
    /// (dynamic MIG): `all`, `none`, or GPU UUIDs and NVML indices separated by commas. The
    /// other MIG-enabled GPUs offer the instances their operator made (static MIG). graft
    /// never changes a GPU's MIG mode.
    #[arg(long, env = "GRAFT_NVIDIA_DYNAMIC_MIG", default_value = "none", value_parser = GpuSelection::parse)]
    pub nvidia_dynamic_mig: GpuSelection,
    /// GPUs shared through NVIDIA MPS: several claims of one namespace at a time, each
    /// consuming a compute percentage and memory through DRA consumable capacity; of a GPU in
    /// MIG mode, each static MIG device is shared so (a daemon per device); the daemons are
    /// graft-mps's (docs/nvidia.md: MPS). `all`, `none`, or UUIDs / indices.
    #[arg(long, env = "GRAFT_NVIDIA_MPS", default_value = "none", value_parser = GpuSelection::parse)]
    pub nvidia_mps: GpuSelection,
    /// GPUs time-sliced among claims, as the device plugin's time-slicing replicas: each is
    /// published for several claims at once (DRA consumable capacity), every claim
    /// consuming one of `--nvidia-time-slicing-replicas` shares unless it asks for more;
    /// of a GPU in MIG mode, its static MIG devices are. No limits: every process may use
    /// all of the device's memory (docs/nvidia.md: Sharing a GPU). `all`, `none`, or UUIDs
    /// / indices; an MPS GPU stays MPS.
    #[arg(long, env = "GRAFT_NVIDIA_TIME_SLICING", default_value = "none", value_parser = GpuSelection::parse)]
    pub nvidia_time_slicing: GpuSelection,
    /// The shares each time-sliced GPU or MIG device is offered as (2 to 1024).
    #[arg(
        long,
        env = "GRAFT_NVIDIA_TIME_SLICING_REPLICAS",
        default_value_t = 4,
        value_parser = clap::value_parser!(u32).range(2..=1024)
    )]
    pub nvidia_time_slicing_replicas: u32,
    /// Taints an MPS GPU `<driver>/mps-tenant=<namespace>` (NoSchedule) while a namespace
    /// holds a share of it, so that the scheduler gives other namespaces' claims another GPU.
    /// Only with every claim of the namespace tolerating its own tenancy: the chart turns it
    /// on together with the admission policy that adds that toleration (docs/nvidia.md).
    #[arg(long, env = "GRAFT_NVIDIA_MPS_TENANT_TAINT")]
    pub nvidia_mps_tenant_taint: bool,
    /// The order dynamic-MIG placements are published in (`nvml`: NVML's own, for
    /// side-by-side benchmarks; docs/placement.md).
    #[arg(
        long,
        env = "GRAFT_NVIDIA_PLACEMENT_ORDER",
        hide = true,
        value_enum,
        default_value = "spare-large"
    )]
    pub nvidia_placement_order: PlacementOrder,
    /// Seconds to wait for a GPU to be free, and for a driver rebind to show.
    #[arg(long, env = "GRAFT_NVIDIA_VFIO_TIMEOUT", default_value_t = 60)]
    pub nvidia_vfio_timeout_seconds: u64,
    /// XIDs that only mark a GPU degraded (a taint with effect None) instead of unhealthy,
    /// comma separated; the default lists application errors (docs/nvidia.md: GPU health).
    #[arg(
        long,
        env = "GRAFT_HEALTH_INFORMATIONAL_XIDS",
        default_value = "13,31,43,45,68,94,109"
    )]
    pub health_informational_xids: String,
    /// Seconds without new events after which a degraded condition (an informational XID)
    /// clears; 0 keeps it until a reset. Unhealthy conditions never clear on time: only
    /// when NVML's recovery action reads none and a probe of the GPU passes.
    #[arg(long, env = "GRAFT_HEALTH_RECOVERY_SECONDS", default_value_t = 300)]
    pub health_recovery_seconds: u64,
    /// Seconds between reads of each GPU's utilisation, memory and power for the metrics
    /// that name the pod using it (graft_gpu_*); 0 turns them off.
    #[arg(long, env = "GRAFT_NVIDIA_USAGE_SECONDS", default_value_t = 15)]
    pub nvidia_usage_seconds: u64,
    /// Seconds between checks that NVML can still reach every GPU.
    #[arg(long, env = "GRAFT_HEALTH_PROBE_SECONDS", default_value_t = 10)]
    pub health_probe_seconds: u64,
    /// Publish NVIDIA GPUs even while a GPU device plugin advertises its resources on this
    /// Node (the two are kept apart some other way); otherwise they are withheld.
    #[arg(long, env = "GRAFT_ALLOW_DEVICE_PLUGIN_COEXISTENCE")]
    pub allow_device_plugin_coexistence: bool,
    /// More Node resources that mean a GPU device plugin runs on this node (names, or
    /// prefixes ending in `*`, separated by commas), beside nvidia.com/gpu,
    /// nvidia.com/gpu.shared and nvidia.com/mig-*. NVIDIA's other resources (the Network
    /// Operator's nvidia.com/hostdev, RDMA devices) withhold nothing.
    #[arg(long, env = "GRAFT_DEVICE_PLUGIN_RESOURCES", value_delimiter = ',')]
    pub device_plugin_resources: Vec<String>,
    /// Ignored: the Node is watched now (kept so that older configurations still start).
    #[arg(
        long,
        hide = true,
        env = "GRAFT_DEVICE_PLUGIN_CHECK_SECONDS",
        default_value_t = 30
    )]
    pub device_plugin_check_seconds: u64,
}
