//! `graft-driver`: the DRA kubelet plugin daemon.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use graft_driver::core::seams::{KillAt, NriGate, StatusFile};
use graft_driver::core::Core;
use graft_driver::discovery::char::CharDiscovery;
use graft_driver::discovery::files::{FilesDiscovery, RefusedDirs, ServedEntries};
use graft_driver::discovery::inventory::Inventory;
use graft_driver::discovery::nvidia::driver_files::Roots;
use graft_driver::discovery::nvidia::dynamic_mig::{MigLedger, MigManager};
use graft_driver::discovery::nvidia::hook_edits::HookConfig;
use graft_driver::discovery::nvidia::mps::MpsManager;
use graft_driver::discovery::nvidia::selection::GpuSelection;
use graft_driver::discovery::nvidia::setup::{ChrootSmi, NvidiaSetup};
use graft_driver::discovery::nvidia::vfio::persistence::{
    NvmlPersistence, PersistenceMode, Untouched,
};
use graft_driver::discovery::nvidia::vfio::Vfio;
use graft_driver::discovery::nvidia::{NvidiaConfig, NvidiaDiscovery};
use graft_driver::discovery::{inotify, report, Discovery};
use graft_driver::edge::{Edge, KUBELET_DEADLINE};
use graft_driver::events::Poster;
use graft_driver::health::classify::parse_xids;
use graft_driver::health::monitor::{self, MonitorConfig};
use graft_driver::health::HealthReport;
use graft_driver::hook_install::install;
use graft_driver::metrics::DriverMetrics;
use graft_driver::plugin::registration::RegistrationState;
use graft_driver::plugin::{self, PluginPaths};
use graft_driver::publisher::Publisher;
use graft_driver::setup::{DeviceSetup, NoSetup};
use graft_record::InjectionPolicy;
use tokio::signal::unix::{signal, SignalKind};
use tracing_subscriber::fmt::writer::BoxMakeWriter;

mod args;
mod endpoints;
mod rescan;
use args::Args;

fn nvidia_config(args: &Args) -> NvidiaConfig {
    let roots = Roots {
        host: args.host_root.clone(),
        driver: args.nvidia_driver_root.clone(),
    };
    // Picked as graft-nri picks it, so that its policy accepts graft-hook's --ldconfig.
    let ldconfig = args.nvidia_ldconfig.clone().unwrap_or_else(|| {
        graft_record::policy::default_ldconfig(&roots.driver, |p| roots.visible(p).is_file())
    });
    NvidiaConfig {
        nvml_lib: args.nvidia_nvml_lib.clone(),
        proc_root: args.proc_root.clone(),
        sys_root: args.sysfs_root.clone(),
        dev_root: args
            .dev_root
            .clone()
            .unwrap_or_else(|| roots.visible(std::path::Path::new("/dev"))),
        hook: HookConfig {
            path: args.nvidia_hook_path.clone(),
            ldconfig,
            params_copy: format!("{}/nvidia/params", args.state_dir.display()),
        },
        imex_channels: args.nvidia_imex_channels,
        passthrough: args.nvidia_passthrough,
        dynamic_mig: args.nvidia_dynamic_mig.clone(),
        mps: args.nvidia_mps.clone(),
        roots,
    }
}

fn nvidia_setup(
    args: &Args,
    config: &NvidiaConfig,
    smi: Arc<std::sync::RwLock<String>>,
    wake: tokio::sync::mpsc::Sender<()>,
    mig: Option<MigManager>,
    mps: Option<MpsManager>,
    persistence: Box<dyn PersistenceMode>,
) -> NvidiaSetup {
    NvidiaSetup {
        vfio: Vfio {
            sys: config.sys_root.clone(),
            proc: config.proc_root.clone(),
            timeout: Duration::from_secs(args.nvidia_vfio_timeout_seconds),
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
        mps,
    }
}

/// The discovery backends, and what the nvidia backend found for its setups.
struct Backends {
    list: Vec<Box<dyn Discovery>>,
    /// The chosen nvidia-smi (time-slicing).
    smi: Option<Arc<std::sync::RwLock<String>>>,
    /// None without the nvidia backend, or when NVML was not found at start.
    nvml: Option<PathBuf>,
}

fn backends(args: &Args, ledger: &MigLedger, metrics: &DriverMetrics) -> anyhow::Result<Backends> {
    let mut out: Vec<Box<dyn Discovery>> = Vec::new();
    let mut smi = None;
    let mut nvml = None;
    for name in &args.discovery {
        match name.trim() {
            "char" => out.push(Box::new(CharDiscovery::new(
                args.device_config.clone(),
                args.sysfs_root.clone(),
                args.host_root.clone(),
            )?)),
            "files" => out.push(Box::new(
                FilesDiscovery::new(
                    args.device_config.clone(),
                    args.host_root.clone(),
                    &args.allowed_mount_roots,
                )?
                .with_refusals(RefusedDirs::with_gauge(metrics.served_dirs_refused())),
            )),
            "nvidia" => {
                // Without NVML the backend fails its scans (reported, retried) rather than
                // graft-driver crash-looping; the other backends serve meanwhile.
                let d = NvidiaDiscovery::unchecked(nvidia_config(args)).with_ledger(ledger.clone());
                smi = Some(d.smi_path());
                nvml = d
                    .nvml_path()
                    .inspect_err(|e| tracing::error!(error = %e, "NVML not found"))
                    .ok();
                out.push(Box::new(d));
            }
            other => bail!("--discovery: unknown backend {other:?} (known: char, files, nvidia)"),
        }
    }
    if out.is_empty() {
        bail!("--discovery: no backend selected");
    }
    Ok(Backends {
        list: out,
        smi,
        nvml,
    })
}

// Two workers whatever the node's core count: the driver's work is a few RPCs at a time, and
// per-core threads (and their malloc arenas) would only add memory.
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    // A probe needs none of the daemon's settings: answered before they are parsed.
    let argv: Vec<String> = std::env::args().collect();
    if let Some(code) = graft_telemetry::probe::requested(&argv, args::DEFAULT_HEALTH_SOCKET) {
        std::process::exit(code.unwrap_or_else(|e| {
            eprintln!("{e}");
            2
        }));
    }
    let started = Instant::now();
    // SAFETY: mallopt before any other thread exists; caps glibc's per-thread arenas, which
    // otherwise dominate a small daemon's RSS.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
    // Everything graft creates (state, records, sockets) is root's alone; explicit modes
    // follow, this closes the window between creating and chmod.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let args = Args::parse();
    graft_telemetry::logs::init(
        args.log_format,
        BoxMakeWriter::new(std::io::stderr),
        std::io::stderr().is_terminal(),
    );
    if let Err(r) = graft_driver::limits::check_qualified_name(&format!("{}/x", args.driver_name)) {
        bail!("--driver-name {:?}: {r}", args.driver_name);
    }
    // Served from the start: liveness answers while discovery and start-up run.
    let metrics = Arc::new(DriverMetrics::default());
    let registration = Arc::new(Mutex::new(RegistrationState::default()));
    graft_telemetry::serve_or_log(
        endpoints::endpoints(&metrics, registration.clone()),
        graft_telemetry::parse_addr(&args.metrics_addr)?,
        &args.health_socket,
    );

    let boot_id = graft_record::read_boot_id(&args.boot_id_path)?;
    let nvidia = args.discovery.iter().any(|d| d.trim() == "nvidia");
    let policy = InjectionPolicy::for_node(
        &args.state_dir,
        &args.nvidia_hook_path,
        nvidia.then_some(args.nvidia_driver_root.as_path()),
        &args.allowed_mount_roots,
    )
    .and_then(|p| match nvidia {
        true => p.with_ldconfig(&nvidia_config(&args).hook.ldconfig),
        false => Ok(p),
    })
    .context(
        "the injection policy (--nvidia-hook-path, --allowed-mount-roots, --nvidia-ldconfig)",
    )?;
    tracing::info!(mount_roots = ?policy.mount_roots(), hook = policy.hook_path(), "injection policy");
    let mut core = Core::new(
        &args.driver_name,
        &args.node_name,
        args.state_dir.clone(),
        &boot_id,
    )?
    .with_policy(policy);
    // The MIG instances graft made before a restart are its own, not the operator's: known
    // before the first scan decides which placements to offer.
    let ledger = MigLedger::default();
    ledger.seed(
        &core
            .setups()
            .context("reading the checkpoint's MIG instances")?,
    );
    let Backends {
        list: backends,
        smi: smi_path,
        nvml: nvml_lib,
    } = backends(&args, &ledger, &metrics)?;
    let informational_xids = parse_xids(&args.health_informational_xids)
        .map_err(|e| anyhow::anyhow!("--health-informational-xids: {e}"))?;
    if nvidia {
        let source = match &args.hook_source {
            Some(s) => s.clone(),
            None => std::env::current_exe()
                .context("locating graft-driver")?
                .with_file_name("graft-hook"),
        };
        let dest = std::path::Path::new(&args.nvidia_hook_path);
        let installed = install(&source, dest, &args.host_root).context("installing graft-hook")?;
        tracing::info!(
            path = %installed.path.display(), sha256 = installed.sha256,
            replaced = installed.changed, "graft-hook verified"
        );
    }
    // Never fatal: a failing backend is reported and retried, the others are published.
    let mut inventory = Inventory::new(&backends);
    let first_scan = inventory.scan(&backends, std::time::SystemTime::now());
    report::record(&first_scan, &inventory, &metrics);
    let devices = inventory.devices().to_vec();
    tracing::info!(devices = devices.len(), "discovered devices");
    // NVML missing at start leaves GPU health, MIG and MPS unstarted: once it is there,
    // graft-driver restarts (once, cleanly) to start them.
    let nvml_missing = nvidia && nvml_lib.is_none();
    let restart = Arc::new(tokio::sync::Notify::new());

    let client = kube::Client::try_default()
        .await
        .context("no Kubernetes client configuration (in-cluster or KUBECONFIG)")?;
    // Rescan requests: from inotify, and from setups that change what the node offers.
    let (wake_tx, wake_rx) = tokio::sync::mpsc::channel(1);
    if let Some(point) = args.crash_at {
        core = core.with_crash_hook(Box::new(KillAt(point)));
    }
    let mig = match (&nvml_lib, &args.nvidia_dynamic_mig) {
        (Some(lib), d) if *d != GpuSelection::None => Some(MigManager::new(
            lib.clone(),
            args.proc_root.clone(),
            ledger.clone(),
        )),
        _ => None,
    };
    // The daemons are graft-mps's (its own DaemonSet); graft-driver marks the shares.
    let mps = (nvml_lib.is_some() && args.nvidia_mps != GpuSelection::None).then(|| MpsManager {
        state_dir: args.state_dir.clone(),
        wait: graft_driver::discovery::nvidia::mps::DEFAULT_WAIT,
    });
    // Persistence mode is turned off and on around passthrough only.
    let persistence: Box<dyn PersistenceMode> = match (&nvml_lib, args.nvidia_passthrough) {
        (Some(lib), true) => Box::new(NvmlPersistence { lib: lib.clone() }),
        _ => Box::new(Untouched),
    };
    let mps_restore = mps.clone();
    let mut setup: Arc<dyn DeviceSetup> = match smi_path {
        Some(smi) => Arc::new(nvidia_setup(
            &args,
            &nvidia_config(&args),
            smi,
            wake_tx.clone(),
            mig,
            mps,
            persistence,
        )),
        None => Arc::new(NoSetup),
    };
    if args.discovery.iter().any(|d| d.trim() == "files") {
        setup = Arc::new(ServedEntries {
            inner: setup,
            host_root: args.host_root.clone(),
        });
    }
    core = core.with_setup(setup);
    core.set_inventory(&devices);
    let margin = Duration::from_secs(args.deadline_margin_seconds);
    if margin >= KUBELET_DEADLINE {
        bail!(
            "--deadline-margin-seconds {}: must be below the kubelet's {} s",
            margin.as_secs(),
            KUBELET_DEADLINE.as_secs()
        );
    }
    let events = Poster::spawn(graft_driver::events::recorder(
        client.clone(),
        &args.node_name,
    ));
    report::post(&first_scan.changes, &events, &args.node_name);
    let edge = Arc::new(
        Edge::new(Arc::new(core), client.clone(), KUBELET_DEADLINE - margin)
            .with_events(events.clone())
            .with_metrics(metrics.clone()),
    );
    tokio::spawn(graft_driver::events::nri::run(
        events.clone(),
        args.node_name.clone(),
        args.state_dir.clone(),
        boot_id.clone(),
        Duration::from_secs(args.nri_event_grace_seconds),
    ));
    tokio::spawn(graft_driver::events::refusals::run(
        events.clone(),
        args.state_dir.clone(),
    ));
    edge.startup().await.context("settling the checkpoint")?;
    if let Some(m) = mps_restore {
        // graft-mps serves the shares marked: exactly the checkpoint's. A failure leaves the
        // other devices working; the next prepare or unprepare of a share corrects its own.
        let core = Arc::clone(edge.core());
        let setups = move || core.setups().map_err(|e| e.to_string());
        match tokio::task::spawn_blocking(move || m.restore(setups)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "restoring the MPS shares"),
            Err(e) => tracing::error!(error = %e, "restoring the MPS shares panicked"),
        }
    }
    rescan::refresh_absent(args.state_dir.clone(), devices.clone()).await;
    let nri_status = StatusFile {
        state_dir: args.state_dir.clone(),
        boot_id: boot_id.clone(),
    };
    tokio::spawn(graft_driver::metrics::keep_counts(
        metrics.clone(),
        Arc::clone(edge.core()),
        Arc::new(move || nri_status.ready().is_ok()),
        Duration::from_secs(15),
    ));

    let (inv_tx, inv_rx) = tokio::sync::watch::channel(devices);
    // Device health: NVML events for GPUs; without the nvidia backend every device stays
    // healthy and the channel only feeds the kubelet's health stream.
    let (health_tx, health_rx) = tokio::sync::watch::channel(HealthReport::default());
    if let Some(lib) = nvml_lib {
        let config = MonitorConfig {
            nvml_lib: lib,
            informational_xids,
            quiet: (args.health_recovery_seconds > 0)
                .then(|| Duration::from_secs(args.health_recovery_seconds)),
            probe_every: Duration::from_secs(args.health_probe_seconds.max(1)),
            state_dir: args.state_dir.clone(),
            boot_id: boot_id.clone(),
        };
        monitor::spawn(config, inv_rx.clone(), health_tx.clone())
            .context("starting the GPU health monitor")?;
        tokio::spawn(graft_driver::health::events::run(
            client.clone(),
            args.node_name.clone(),
            args.driver_name.clone(),
            args.state_dir.clone(),
            health_rx.clone(),
        ));
    }
    let publisher = Publisher::new(
        client,
        args.driver_name.clone(),
        args.node_name.clone(),
        started,
    )
    .with_health(health_rx.clone(), args.health_taint_effect)
    .with_metrics(metrics.clone())
    .with_snapshot(args.state_dir.clone());
    tokio::spawn(publisher.run(inv_rx.clone()));
    tokio::spawn(graft_driver::metrics::watch_devices(
        metrics.clone(),
        inv_rx.clone(),
        health_rx.clone(),
    ));

    // Rescans: on changes in the watched directories, on request, and periodically.
    let backends = Arc::new(backends);
    let watched = Arc::clone(&backends);
    let watch_paths =
        move || -> Vec<PathBuf> { watched.iter().flat_map(|b| b.watch_paths()).collect() };
    match inotify::spawn_watcher(watch_paths, wake_tx) {
        Ok(n) => tracing::debug!(directories = n, "watching for device changes"),
        Err(e) => tracing::warn!(error = %e, "no change notification; periodic rescans only"),
    }
    tokio::spawn(rescan::run(rescan::Rescan {
        backends,
        inventory,
        core: Arc::clone(edge.core()),
        state_dir: args.state_dir.clone(),
        every: Duration::from_secs(args.rescan_seconds.max(1)),
        events: events.clone(),
        node: args.node_name.clone(),
        metrics: metrics.clone(),
        restart_when_nvml_appears: nvml_missing.then(|| Arc::clone(&restart)),
        wake: wake_rx,
        out: inv_tx,
    }));

    let cleanup_edge = Arc::clone(&edge);
    let cleanup_every = Duration::from_secs(args.cleanup_seconds.max(1));
    tokio::spawn(async move {
        loop {
            match cleanup_edge.cleanup().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(claims = n, "rolled back stale prepares"),
                Err(e) => tracing::warn!(error = %e, "checkpoint cleanup failed"),
            }
            tokio::time::sleep(cleanup_every).await;
        }
    });

    let paths = PluginPaths::new(
        &args.kubelet_dir,
        &args.driver_name,
        args.pod_uid.as_deref(),
    )?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let shutdown = async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = restart.notified() => {}
        }
    };
    // Held until the end: without a monitor, the report stays live and empty.
    let _health_tx = health_tx;
    let feed = plugin::health::HealthFeed {
        pool: args.node_name.clone(),
        inventory: inv_rx,
        health: health_rx,
    };
    plugin::serve(edge, &paths, registration, Some(feed), shutdown).await?;
    Ok(())
}
