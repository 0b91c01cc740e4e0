//! graft-driver's command line (each flag also reads an environment variable, which is how
//! the DaemonSet sets them).

use std::path::PathBuf;

use clap::Parser;
use graft_driver::core::seams::CrashPoint;
use graft_driver::discovery::config::DEFAULT_CONFIG_PATH;
use graft_driver::discovery::nvidia::selection::GpuSelection;
use graft_driver::edge::DEFAULT_MARGIN;
use graft_driver::health::taints::FatalEffect;

#[derive(Debug, Parser)]
#[command(name = "graft-driver", version, about = "graft's DRA kubelet plugin")]
pub struct Args {
    /// Driver name: the ResourceSlices' spec.driver and what DeviceClasses select.
    #[arg(long, env = "GRAFT_DRIVER_NAME", default_value = graft_driver::DEFAULT_DRIVER_NAME)]
    pub driver_name: String,
    /// This node's name (the downward API's spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,
    /// The kubelet's root directory; the plugin sockets go below it.
    #[arg(long, env = "GRAFT_KUBELET_DIR", default_value = "/var/lib/kubelet")]
    pub kubelet_dir: PathBuf,
    /// State shared with graft-nri: records, the NRI status, the prepare checkpoint.
    #[arg(long, env = "GRAFT_STATE_DIR", default_value = graft_record::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Log lines as `text` or `json` (one object per line; a claim's lines carry `claim`
    /// and `claim_uid`).
    #[arg(long, env = "GRAFT_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: graft_telemetry::logs::LogFormat,
    /// This pod's UID: enables rolling updates with per-instance socket names.
    #[arg(long, env = "POD_UID")]
    pub pod_uid: Option<String>,
    /// Discovery backends, comma separated: char, files, nvidia.
    #[arg(
        long,
        env = "GRAFT_DISCOVERY",
        value_delimiter = ',',
        default_value = "char"
    )]
    pub discovery: Vec<String>,
    /// The devices config: the char backend's device nodes, the files backend's directories.
    #[arg(long, env = "GRAFT_DEVICE_CONFIG", default_value = DEFAULT_CONFIG_PATH)]
    pub device_config: PathBuf,
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
    /// More host directories mount sources may come from, comma separated (`/dev`, the
    /// state directory and, with the nvidia backend, the driver's directories always may).
    /// graft-nri must be given the same list.
    #[arg(long, env = "GRAFT_ALLOWED_MOUNT_ROOTS", value_delimiter = ',')]
    pub allowed_mount_roots: Vec<String>,
    /// IMEX channels offered when the node's GPUs are in an NVLink fabric clique.
    #[arg(long, env = "GRAFT_NVIDIA_IMEX_CHANNELS", default_value_t = 1)]
    pub nvidia_imex_channels: u32,
    /// Offer GPUs for VFIO passthrough (rebound to vfio-pci while prepared).
    #[arg(long, env = "GRAFT_NVIDIA_PASSTHROUGH")]
    pub nvidia_passthrough: bool,
    /// MIG-enabled GPUs whose MIG instances graft makes itself when a claim is prepared
    /// (dynamic MIG): `all`, `none`, or GPU UUIDs and NVML indices separated by commas. The
    /// other MIG-enabled GPUs offer the instances their operator made (static MIG). graft
    /// never changes a GPU's MIG mode.
    #[arg(long, env = "GRAFT_NVIDIA_DYNAMIC_MIG", default_value = "none", value_parser = parse_gpu_selection)]
    pub nvidia_dynamic_mig: GpuSelection,
    /// GPUs (MIG off) shared through NVIDIA MPS: several claims of one namespace at a time,
    /// each consuming a compute percentage and memory through DRA consumable capacity; the
    /// daemons are graft-mps's (README: MPS). `all`, `none`, or UUIDs / indices.
    #[arg(long, env = "GRAFT_NVIDIA_MPS", default_value = "none", value_parser = parse_gpu_selection)]
    pub nvidia_mps: GpuSelection,
    /// Seconds to wait for a GPU to be free, and for a driver rebind to show.
    #[arg(long, env = "GRAFT_NVIDIA_VFIO_TIMEOUT", default_value_t = 60)]
    pub nvidia_vfio_timeout_seconds: u64,
    #[arg(long, env = "GRAFT_SYSFS_ROOT", default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// The host's /proc (/proc/devices and /proc/driver are not namespaced, so our own);
    /// tests on nodes without the NVIDIA kernel module point it at a fake one.
    #[arg(long, env = "GRAFT_PROC_ROOT", hide = true, default_value = "/proc")]
    pub proc_root: PathBuf,
    /// The host's /dev as this process sees it (default: `dev` below the host root); tests
    /// on nodes without the devices point it at a fake one.
    #[arg(long, env = "GRAFT_DEV_ROOT", hide = true)]
    pub dev_root: Option<PathBuf>,
    /// Where the host's root is visible: configured device paths are looked up below it
    /// (the DaemonSet mounts the host's /dev at /host/dev) and published as host paths.
    #[arg(long, env = "GRAFT_HOST_ROOT", default_value = "/")]
    pub host_root: PathBuf,
    /// Seconds between full rescans (changes in watched directories rescan at once).
    #[arg(long, default_value_t = 30)]
    pub rescan_seconds: u64,
    /// Seconds between passes that roll back half-done prepares of deleted claims.
    #[arg(long, default_value_t = 600)]
    pub cleanup_seconds: u64,
    /// Seconds before the kubelet's deadline (45 s) a prepare or unprepare is answered: a
    /// claim whose setup is still running is then answered "in progress" and its work goes
    /// on, so that the kubelet's retry finds it done.
    #[arg(long, env = "GRAFT_DEADLINE_MARGIN", default_value_t = DEFAULT_MARGIN.as_secs())]
    pub deadline_margin_seconds: u64,
    #[arg(long, hide = true, default_value = graft_record::BOOT_ID_PATH)]
    pub boot_id_path: PathBuf,
    /// XIDs that only mark a GPU degraded (a taint with effect None) instead of unhealthy,
    /// comma separated; the default lists application errors (README: GPU health).
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
    /// The taint effect of an unhealthy device: NoSchedule, or NoExecute to evict its pods.
    #[arg(long, env = "GRAFT_HEALTH_TAINT_EFFECT", default_value = "NoSchedule")]
    pub health_taint_effect: FatalEffect,
    /// How long graft-nri may be away before the Node gets an `NRIPluginNotConnected`
    /// Event (a graft pod restart stays quiet).
    #[arg(long, env = "GRAFT_NRI_EVENT_GRACE_SECONDS", default_value_t = 30)]
    pub nri_event_grace_seconds: u64,
    /// Seconds between checks that NVML can still reach every GPU.
    #[arg(long, env = "GRAFT_HEALTH_PROBE_SECONDS", default_value_t = 10)]
    pub health_probe_seconds: u64,
    /// Serve /metrics, /healthz and /readyz on this TCP address (default: this host only;
    /// the chart gives the pod's IP; `:9477`: every address; empty or `off`: not at all). Bound as soon as it is free: during a rolling update the
    /// instance being replaced holds it.
    #[arg(long, env = "GRAFT_METRICS_ADDR", default_value = "127.0.0.1:9477")]
    pub metrics_addr: String,
    /// Serve the same on this Unix socket, for this container's probes (`--probe`); empty:
    /// not at all.
    #[arg(long, env = "GRAFT_HEALTH_SOCKET", default_value = DEFAULT_HEALTH_SOCKET)]
    pub health_socket: PathBuf,
    /// Run as a probe instead: ask the health socket (`live`: /healthz, `ready`: /readyz)
    /// and exit 0 when it answers 200, else 1 with the reason on stderr.
    // Handled before the other arguments are parsed (see main); here for --help.
    #[allow(dead_code)]
    #[arg(long, value_parser = ["live", "ready"])]
    pub probe: Option<String>,
    /// Test hook: SIGKILL this process at a step of the next prepare or unprepare.
    #[arg(long, hide = true, value_enum)]
    pub crash_at: Option<CrashPoint>,
}

pub const DEFAULT_HEALTH_SOCKET: &str = "/run/graft/driver.sock";

fn parse_gpu_selection(s: &str) -> Result<GpuSelection, String> {
    GpuSelection::parse(s).map_err(|e| e.to_string())
}
