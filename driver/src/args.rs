//! graft-driver's command line (each flag also reads an environment variable, which is how
//! the DaemonSet sets them).

use std::path::PathBuf;

use clap::Parser;
use graft_driver::claims::seams::CrashPoint;
use graft_driver::discovery::config::DEFAULT_CONFIG_PATH;
use graft_driver::edge::DEFAULT_MARGIN;
use graft_driver::families::{Family, Flags};
use graft_driver::health::taints::FatalEffect;

#[derive(Debug, Parser)]
#[command(name = "graft-driver", version = graft_telemetry::VERSION, about = "graft's DRA kubelet plugin")]
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
        default_value = "char",
        value_parser = Family::parse
    )]
    pub discovery: Vec<Family>,
    /// The devices config: the char backend's device nodes, the files backend's directories.
    #[arg(long, env = "GRAFT_DEVICE_CONFIG", default_value = DEFAULT_CONFIG_PATH)]
    pub device_config: PathBuf,
    /// More host directories mount sources may come from, comma separated (`/dev`, the
    /// state directory and, with the nvidia backend, the driver's directories always may).
    /// graft-nri must be given the same list.
    #[arg(long, env = "GRAFT_ALLOWED_MOUNT_ROOTS", value_delimiter = ',')]
    pub allowed_mount_roots: Vec<String>,
    /// The device families' own flags (NVIDIA's).
    #[command(flatten)]
    pub backends: Flags,
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
    /// The taint effect of an unhealthy device: NoSchedule, or NoExecute to evict its pods.
    #[arg(long, env = "GRAFT_HEALTH_TAINT_EFFECT", default_value = "NoSchedule")]
    pub health_taint_effect: FatalEffect,
    /// How long graft-nri may be away before the Node gets an `NRIPluginNotConnected`
    /// Event (a graft pod restart stays quiet).
    #[arg(long, env = "GRAFT_NRI_EVENT_GRACE_SECONDS", default_value_t = 30)]
    pub nri_event_grace_seconds: u64,
    /// Keep the pods bound to this node from a watch, so that a prepare reads only its
    /// claims, not also their pods; needs `list` and `watch` on pods cluster-wide, which
    /// the chart grants only with `driver.podCache`.
    #[arg(long, env = "GRAFT_POD_CACHE")]
    pub pod_cache: bool,
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
