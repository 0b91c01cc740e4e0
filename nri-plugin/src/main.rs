//! `graft-nri`: connects to the container runtime's NRI socket and injects, at container
//! creation, the devices graft-driver recorded for the container's pod.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, Context};
use clap::Parser;
use graft_nri::metrics::NriMetrics;
use graft_nri::plugin::GraftPlugin;
use graft_nri::validator::{VALIDATOR_INDEX, VALIDATOR_NAME};
use graft_nri_sdk::{self as sdk, Options, Transport};
use graft_record::policy::{nvidia_mount_roots, DEFAULT_HOOK_PATH};
use graft_record::{
    read_boot_id, InjectionPolicy, RecordStore, StatusPublisher, BOOT_ID_PATH, DEFAULT_STATE_DIR,
};
use graft_runtime::{Daemon, How, Signals, TaskFailed, Workers};
use graft_telemetry::logs::LogFormat;

mod endpoints;
mod validate;

#[derive(Debug, Parser)]
#[command(name = "graft-nri", version = graft_telemetry::VERSION, about)]
struct Args {
    /// The runtime's NRI socket (external mode). Ignored when the runtime started us and
    /// passed NRI_PLUGIN_SOCKET.
    #[arg(
        long,
        env = "GRAFT_NRI_SOCKET",
        default_value = "/var/run/nri/nri.sock"
    )]
    socket: PathBuf,
    /// State directory shared with graft-driver.
    #[arg(long, env = "GRAFT_STATE_DIR", default_value = DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
    /// Plugin name registered with the runtime [default: graft; graft-validator with
    /// --validate].
    #[arg(long, env = "NRI_PLUGIN_NAME")]
    name: Option<String>,
    /// Two-digit plugin index; plugins are called in ascending order [default: 10; 99 with
    /// --validate].
    #[arg(long, env = "NRI_PLUGIN_IDX")]
    index: Option<String>,
    /// Run as graft's NRI validator instead (containerd 2.2+): refuse every container the
    /// records give devices to whose adjustment lacks graft-nri's edits (graft-nri was not
    /// connected, or was lost during the request). Run it beside graft-nri, as a process of
    /// its own (docs/daemons.md).
    #[arg(long)]
    validate: bool,
    /// graft-hook's host path: the only hook a record may name (as graft-driver installs it).
    #[arg(long, env = "GRAFT_NVIDIA_HOOK_PATH", default_value = DEFAULT_HOOK_PATH)]
    hook_path: String,
    /// The NVIDIA driver root, when the node has the nvidia backend: its driver files may be
    /// mounted (with `/`, only the driver's directories; see docs/daemons.md).
    #[arg(long, env = "GRAFT_NVIDIA_DRIVER_ROOT")]
    nvidia_driver_root: Option<PathBuf>,
    /// The host ldconfig graft-hook may run (graft-driver's `--nvidia-ldconfig`); by
    /// default any graft-driver picks from: below --nvidia-driver-root, then the host's.
    #[arg(long, env = "GRAFT_NVIDIA_LDCONFIG")]
    nvidia_ldconfig: Option<String>,
    /// More host directories mount sources may come from, comma separated (`/dev` and the
    /// state directory always may).
    #[arg(long, env = "GRAFT_ALLOWED_MOUNT_ROOTS", value_delimiter = ',')]
    allowed_mount_roots: Vec<String>,
    /// Where the host's root is visible to graft-nri: entries of served directories (under
    /// --allowed-mount-roots) are checked there before a container gets them.
    #[arg(long, env = "GRAFT_HOST_ROOT", default_value = "/")]
    host_root: PathBuf,
    /// Every CreateContainer is answered within this many milliseconds, or refused: the
    /// runtime would otherwise drop the plugin and start containers without their devices.
    /// Lowered to half the runtime's request timeout when that is shorter.
    #[arg(long, env = "GRAFT_NRI_DEADLINE_MS", default_value_t = 1000)]
    deadline_ms: u64,
    /// Log to this file instead of stderr (a pre-installed plugin's stderr is /dev/null).
    #[arg(long, env = "GRAFT_LOG_FILE")]
    log_file: Option<PathBuf>,
    /// Log lines as `text` or `json` (one object per line; a container's lines carry `pod`,
    /// `container` and `container_id`).
    #[arg(long, env = "GRAFT_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    /// How long the runtime gets to stop an evicted container before graft says so and
    /// retries through a CreateContainer reply.
    #[arg(long, default_value_t = 5000, hide = true)]
    eviction_grace_ms: u64,
    /// Serve /metrics, /healthz and /readyz on this TCP address (default: this host only;
    /// the chart gives the pod's IP; `:9478`: every address; empty or `off`: not at all).
    /// Bound as soon as it is free: during a rolling update the instance being replaced
    /// holds it. [default: 127.0.0.1:9478; off with --validate]
    #[arg(long, env = "GRAFT_METRICS_ADDR")]
    metrics_addr: Option<String>,
    /// Serve the same on this Unix socket, for this container's probes (`--probe`); empty:
    /// not at all. [default: /run/graft/nri.sock; /run/graft/nri-validator.sock with
    /// --validate]
    #[arg(long, env = "GRAFT_HEALTH_SOCKET")]
    health_socket: Option<PathBuf>,
    /// Run as a probe instead: ask the health socket (`live`: /healthz, `ready`: /readyz)
    /// and exit 0 when it answers 200, else 1 with the reason on stderr.
    // Handled before the other arguments are parsed (see main); here for --help.
    #[allow(dead_code)]
    #[arg(long, value_parser = ["live", "ready"])]
    probe: Option<String>,
    /// GPU requests to NVIDIA's container toolkit (`NVIDIA_VISIBLE_DEVICES` and the like,
    /// from an image or a pod spec) in containers graft gives no GPU: `clear` rewrites them
    /// to ask nothing, `refuse` refuses the container, `keep` leaves them (NVIDIA's device
    /// plugin on the same node gives its pods GPUs through them). The chart sets `clear` on
    /// its GPU nodes.
    #[arg(
        long,
        env = "GRAFT_NRI_UNCLAIMED_GPU_REQUESTS",
        value_enum,
        default_value = "keep"
    )]
    unclaimed_gpu_requests: graft_nri::unclaimed::Mode,
    /// Where this boot's id is read from.
    #[arg(long, default_value = BOOT_ID_PATH, hide = true)]
    boot_id_path: PathBuf,
}

const DEFAULT_HEALTH_SOCKET: &str = "/run/graft/nri.sock";
const VALIDATOR_HEALTH_SOCKET: &str = "/run/graft/nri-validator.sock";
/// The async runtime's workers in both modes: two, so that a hung read on one leaves the
/// other to answer the runtime (`reads`).
const WORKERS: usize = 2;
/// How long the session gets to stop at shutdown.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

fn main() -> anyhow::Result<()> {
    // A probe needs none of the daemon's settings: answered before they are parsed.
    graft_runtime::exit_if_probe(match std::env::args().any(|a| a == "--validate") {
        false => DEFAULT_HEALTH_SOCKET,
        true => VALIDATOR_HEALTH_SOCKET,
    });
    let args = Args::parse();
    // Everything graft-nri creates in the state directory is root's alone.
    graft_runtime::private_umask();
    // Held until main returns: dropping it writes out the lines still buffered.
    let _logs = graft_runtime::init_logs(args.log_format, args.log_file.as_deref())?;
    let transport = match std::env::var("NRI_PLUGIN_SOCKET") {
        Ok(fd) => Transport::PreInstalled(fd.parse().with_context(|| {
            format!("NRI_PLUGIN_SOCKET={fd:?} is not a file descriptor number")
        })?),
        Err(_) => Transport::External(args.socket.clone()),
    };
    if let Transport::External(path) = &transport {
        warn_if_shared(path);
    }
    let (name, index) = match args.validate {
        false => ("graft", "10"),
        true => (VALIDATOR_NAME, VALIDATOR_INDEX),
    };
    let name = args.name.clone().unwrap_or_else(|| name.to_string());
    let index = args.index.clone().unwrap_or_else(|| index.to_string());
    let mut opts = Options::new(&name, &index, transport);
    opts.handler_deadline = std::time::Duration::from_millis(args.deadline_ms.max(1));
    if args.validate {
        // A runtime without validation drops the validator on every try: once a minute
        // is enough (a connection that worked starts the backoff afresh).
        opts.backoff_max = std::time::Duration::from_secs(60);
    }
    opts.validate()?;
    let store = RecordStore::open(&args.state_dir)
        .with_context(|| format!("opening state directory {}", args.state_dir.display()))?;
    // Made here, so that a refusal never creates (and fsyncs) it on its way.
    if let Err(e) = graft_record::refusals::create_dir(&args.state_dir) {
        tracing::warn!(error = %e, "no refusal journal; refusals get no Event on the pod");
    }
    let policy = policy(&args)?;
    tracing::info!(mount_roots = ?policy.mount_roots(), hook = policy.hook_path(), ldconfig = ?policy.ldconfigs(), "injection policy");
    let boot_id = read_boot_id(&args.boot_id_path)?;
    let (health_socket, metrics_addr) = match args.validate {
        false => (DEFAULT_HEALTH_SOCKET, "127.0.0.1:9478"),
        true => (VALIDATOR_HEALTH_SOCKET, "off"),
    };
    let health_socket = args.health_socket.clone().unwrap_or(health_socket.into());
    let metrics_addr =
        graft_telemetry::parse_addr(args.metrics_addr.as_deref().unwrap_or(metrics_addr))?;
    if args.validate {
        let deadline = std::time::Duration::from_millis(args.deadline_ms.max(1));
        return validate::main(store, policy, deadline, metrics_addr, &health_socket, opts);
    }
    let metrics = Arc::new(NriMetrics::default());
    let holding = Arc::new(AtomicBool::new(false));

    graft_runtime::block_on(Workers::Fixed(WORKERS), async move {
        tracing::info!(version = graft_telemetry::VERSION, state_dir = %args.state_dir.display(), "graft-nri starting");
        // From the start, so that probes answer while this instance waits for the lock.
        endpoints::telemetry(
            &metrics,
            holding.clone(),
            args.state_dir.clone(),
            boot_id.clone(),
        )
        .serve(metrics_addr, Some(&health_socket));
        let mut signals = Signals::install()?;
        let plugin_name = format!("{index}-{name}");
        let status = tokio::select! {
            s = acquire_status(&args.state_dir, &plugin_name, &boot_id) => s?,
            _ = signals.recv() => {
                tracing::info!("stopping on signal while waiting for the running graft-nri");
                return Ok(());
            }
        };
        holding.store(true, Ordering::Relaxed);
        let plugin = Arc::new(
            GraftPlugin::new(store, status, policy)
                .with_eviction_grace(std::time::Duration::from_millis(args.eviction_grace_ms))
                .with_host_root(args.host_root.clone())
                .with_deadline(std::time::Duration::from_millis(args.deadline_ms.max(1)))
                .with_metrics(metrics)
                .with_unclaimed_gpu_requests(args.unclaimed_gpu_requests),
        );
        // The NRI session runs until the process stops: its end, however it comes, is an
        // error (the runtime restarts a pre-installed plugin; the DaemonSet this one).
        let mut daemon = Daemon::new();
        daemon.spawn(SESSION, sdk::run(plugin.clone(), opts));
        match daemon.until_stopped(&mut signals).await {
            Ok(_) => {
                plugin.connection_state_stopped();
                let _overdue = daemon.shutdown(STOP_WAIT).await;
                Ok(())
            }
            Err(ended) => Err(session_ended(ended)),
        }
    })?
}

/// The NRI session's task.
const SESSION: &str = "nri-session";

/// graft-nri's injection policy: the common roots, and NVIDIA's when it is told of the
/// driver (graft-nri has no backends: NVIDIA's roots are the one family's it is told of).
fn policy(args: &Args) -> anyhow::Result<InjectionPolicy> {
    let family_roots: Vec<String> = args
        .nvidia_driver_root
        .as_deref()
        .map(nvidia_mount_roots)
        .unwrap_or_default();
    InjectionPolicy::for_node(
        &args.state_dir,
        &args.hook_path,
        &family_roots,
        &args.allowed_mount_roots,
    )
    // The ldconfig graft-hook may run: the configured one, else any graft-driver picks
    // from (this container may not see the host's files to pick the same); none without
    // the nvidia backend.
    .and_then(
        |p| match (&args.nvidia_ldconfig, &args.nvidia_driver_root) {
            (Some(l), _) => p.with_ldconfig(l),
            (None, Some(root)) => p.with_ldconfig_candidates(root),
            (None, None) => Ok(p),
        },
    )
    .context(
        "graft-nri's injection policy (--hook-path, --allowed-mount-roots, --nvidia-driver-root, \
         --nvidia-ldconfig)",
    )
}

/// Why the NRI session ended, logged at error (a pre-installed plugin's stderr is
/// /dev/null, so the log file is where this is seen).
fn session_ended(ended: TaskFailed) -> anyhow::Error {
    ended_error(ended, "NRI plugin stopped", "graft-nri stops")
}

/// A session's end as the error graft-nri exits with (`what`: the error's first words),
/// logged at error as `line`.
fn ended_error(ended: TaskFailed, what: &'static str, line: &'static str) -> anyhow::Error {
    let err = match ended.how {
        How::Failed(e) => anyhow::Error::from_boxed(e).context(what),
        How::Returned => anyhow!("{what}: the session ended"),
        How::Panicked(why) => anyhow!("{what}: the session panicked ({why})"),
    };
    tracing::error!(error = format!("{err:#}"), "{line}");
    err
}

/// Takes the status lock. During a rolling update the new instance starts beside the old
/// one: it waits for the old one to exit instead of failing, so the update can proceed (the
/// DaemonSet only removes the old pod once the new one is ready). Two instances must never
/// inject at once.
async fn acquire_status(
    state_dir: &std::path::Path,
    plugin: &str,
    boot_id: &str,
) -> anyhow::Result<StatusPublisher> {
    let mut waiting = false;
    loop {
        let (dir, name, boot) = (
            state_dir.to_path_buf(),
            plugin.to_string(),
            boot_id.to_string(),
        );
        // Creating the lock and writing the status file are file I/O.
        let tried =
            tokio::task::spawn_blocking(move || StatusPublisher::acquire(&dir, &name, boot))
                .await
                .context("taking the status lock failed internally")?;
        match tried {
            Ok(s) => return Ok(s),
            Err(graft_record::RecordError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::WouldBlock =>
            {
                if !waiting {
                    tracing::info!(
                        "another graft-nri runs on this state directory; waiting for it to exit"
                    );
                    waiting = true;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whoever can connect to the runtime's NRI socket can register a plugin and edit every
/// container's spec: it must be root's alone (connecting needs write permission).
fn warn_if_shared(socket: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(socket) else {
        return;
    };
    if m.uid() != 0 || m.mode() & 0o022 != 0 {
        tracing::warn!(
            socket = %socket.display(), owner = m.uid(), mode = format!("{:o}", m.mode() & 0o7777),
            "the NRI socket can be connected to by others than root: any process that can \
             connect can register a plugin and edit every container; make it root-only"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Panics, where the session would return.
    fn bug() -> Result<(), sdk::SdkError> {
        panic!("bug in the session")
    }

    #[tokio::test]
    async fn an_ended_session_is_an_error_with_its_reason() {
        let mut tasks = Daemon::new();
        tasks.spawn(SESSION, async {
            Err::<(), _>(sdk::SdkError::Closed("runtime went away".into()))
        });
        let e = format!("{:#}", session_ended(tasks.failed().await));
        assert!(
            e.contains("NRI plugin stopped") && e.contains("runtime went away"),
            "{e}"
        );

        tasks.spawn(SESSION, async { bug() });
        let e = format!("{:#}", session_ended(tasks.failed().await));
        assert!(
            e.contains("panicked") && e.contains("bug in the session"),
            "{e}"
        );
    }
}
