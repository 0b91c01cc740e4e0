//! graft-driver's start-up, in an order that matters: the probe endpoints first (liveness
//! answers throughout); the families opened and graft-nri's policy built from them before
//! the core; each family's work before the first scan (the MIG ledger seeded from the
//! checkpoint, graft-hook installed); the checkpoint settled before any family's work that
//! reads it (the MPS shares); the long-running tasks last, each a named task of one
//! [`Daemon`]; then the kubelet plugin until a signal or a restart request.

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use graft_driver::backend::router::Router;
use graft_driver::backend::{Backend, Node, Running};
use graft_driver::claims::seams::{KillAt, NriGate, StatusFile};
use graft_driver::claims::Core;
use graft_driver::coexistence::Verdict;
use graft_driver::daemon::{Daemon, Ends};
use graft_driver::discovery::inventory::Inventory;
use graft_driver::discovery::{inotify, report, Discovery};
use graft_driver::edge::{Edge, PodCache, KUBELET_DEADLINE};
use graft_driver::events::node as node_events;
use graft_driver::events::{node_ref, Poster};
use graft_driver::health::HealthReport;
use graft_driver::metrics::DriverMetrics;
use graft_driver::plugin::registration::RegistrationState;
use graft_driver::plugin::{self, PluginPaths};
use graft_driver::publisher::Publisher;
use graft_record::InjectionPolicy;
use kube::runtime::events::Recorder;

use crate::args::Args;
use crate::{cleanup, endpoints, rescan};

/// How long the tasks get to stop at shutdown.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// Runs graft-driver until `shutdown` resolves (a signal) or a family asks for a restart.
pub async fn run(
    args: Args,
    started: Instant,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    if let Err(r) = graft_driver::limits::check_qualified_name(&format!("{}/x", args.driver_name)) {
        bail!("--driver-name {:?}: {r}", args.driver_name);
    }
    // Served from the start: liveness answers while discovery and start-up run.
    let metrics = Arc::new(DriverMetrics::default());
    let registration = Arc::new(Mutex::new(RegistrationState::default()));
    let mut daemon = graft_driver::daemon::counted(metrics.clone());
    endpoints::telemetry(&metrics, registration.clone(), daemon.ended()).serve(
        graft_telemetry::parse_addr(&args.metrics_addr)?,
        Some(&args.health_socket),
    );

    let boot_id = graft_record::read_boot_id(&args.boot_id_path)?;
    // Rescan requests: from inotify, and from setups that change what the node offers.
    let (wake_tx, wake_rx) = tokio::sync::mpsc::channel(1);
    let node = Node {
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
        rescan: wake_tx.clone(),
    };
    // Made before the families open (no request yet): a start-up that fails on devices.toml
    // or graft-hook's install says so on the Node before the process ends.
    let client = kube::Client::try_default()
        .await
        .context("no Kubernetes client configuration (in-cluster or KUBECONFIG)")?;
    let recorder = graft_driver::events::recorder(client.clone(), &args.node_name);
    let mut backends = match open(&args, &node) {
        Ok(b) => b,
        Err(e) => return Err(told(&recorder, &args.node_name, e).await),
    };
    let policy = policy(&args, &backends).context(
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
    for b in &mut backends {
        if let Err(e) = b.before_scan(&core) {
            return Err(told(&recorder, &args.node_name, e.into()).await);
        }
    }
    // Never fatal: a failing backend is reported and retried, the others are published.
    let discoveries: Vec<Box<dyn Discovery>> = backends
        .iter_mut()
        .filter_map(|b| b.take_discovery())
        .collect();
    let mut inventory = Inventory::new(&discoveries);
    let first_scan = inventory.scan(&discoveries, std::time::SystemTime::now());
    report::record(&first_scan, &inventory, &metrics);
    let devices = inventory.devices().to_vec();
    tracing::info!(devices = devices.len(), "discovered devices");
    // A family that could not start everything (NVML missing) has graft-driver restart
    // (once, cleanly) when its scan works.
    let restart = Arc::new(tokio::sync::Notify::new());
    let when_up: Vec<_> = backends
        .iter()
        .filter_map(|b| Some((b.name(), b.restart_when_up()?)))
        .collect();

    if let Some(point) = args.crash_at {
        core = core.with_crash_hook(Box::new(KillAt(point)));
    }
    let router = Router::new(backends.iter().filter_map(|b| b.route()).collect());
    core = core.with_setup(Arc::new(router));
    core.set_inventory(&devices);
    let margin = Duration::from_secs(args.deadline_margin_seconds);
    if margin >= KUBELET_DEADLINE {
        bail!(
            "--deadline-margin-seconds {}: must be below the kubelet's {} s",
            margin.as_secs(),
            KUBELET_DEADLINE.as_secs()
        );
    }
    let (events, posting) = Poster::with_task(recorder);
    daemon.spawn("event-poster", posting);
    report::post(&first_scan.changes, &events, &args.node_name);
    let mut pods = PodCache::default();
    if args.pod_cache {
        let (cache, watching) = PodCache::watch(client.clone(), &args.node_name);
        daemon.spawn("pod-cache", watching);
        pods = cache;
    }
    let edge = Arc::new(
        Edge::new(Arc::new(core), client.clone(), KUBELET_DEADLINE - margin)
            .with_pod_cache(pods)
            .with_events(events.clone())
            .with_metrics(metrics.clone()),
    );
    let (nri_outage_tx, nri_outage) = tokio::sync::watch::channel(None);
    // GPUs beside NVIDIA's device plugin: withheld unless the operator allows both.
    let guard = args
        .discovery
        .contains(&graft_driver::families::Family::Nvidia)
        && !args.allow_device_plugin_coexistence;
    let first = if guard {
        Verdict::Unknown
    } else {
        Verdict::Clear
    };
    let (coexistence_tx, coexistence) = tokio::sync::watch::channel(first);
    if guard {
        daemon.spawn(
            "device-plugin-guard",
            graft_driver::coexistence::run(
                client.clone(),
                args.node_name.clone(),
                events.clone(),
                coexistence_tx,
                Duration::from_secs(args.device_plugin_check_seconds.max(1)),
                args.device_plugin_resources.clone(),
            ),
        );
    }
    daemon.spawn(
        "nri-events",
        graft_driver::events::nri::run(
            events.clone(),
            args.node_name.clone(),
            args.state_dir.clone(),
            boot_id.clone(),
            Duration::from_secs(args.nri_event_grace_seconds),
            nri_outage_tx,
        ),
    );
    daemon.spawn(
        "refusal-events",
        graft_driver::events::refusals::run(events.clone(), args.state_dir.clone()),
    );
    if let Some(r) = edge.startup().await.context("settling the checkpoint")? {
        events.post(
            node_events::checkpoint_rebuilt(&r),
            node_ref(&args.node_name),
        );
    }
    for b in &backends {
        b.after_startup(Arc::clone(edge.core())).await;
    }
    rescan::refresh_absent(args.state_dir.clone(), devices.clone()).await;
    let nri_status = StatusFile {
        state_dir: args.state_dir.clone(),
        boot_id: boot_id.clone(),
    };
    daemon.spawn(
        "claim-counts",
        graft_driver::metrics::keep_counts(
            metrics.clone(),
            Arc::clone(edge.core()),
            Arc::new(move || nri_status.ready().is_ok()),
            Duration::from_secs(15),
        ),
    );

    let (inv_tx, inv_rx) = tokio::sync::watch::channel(devices);
    // Device health: from the families that watch it (NVIDIA: NVML events); without one
    // every device stays healthy and the channel only feeds the kubelet's health stream.
    let (health_tx, health_rx) = tokio::sync::watch::channel(HealthReport::default());
    let running = Running {
        client: client.clone(),
        node: &node,
        boot_id: &boot_id,
        inventory: inv_rx.clone(),
        health: &health_tx,
    };
    for b in &mut backends {
        b.start(&mut daemon, &running)?;
    }
    let publisher = Publisher::new(
        client,
        args.driver_name.clone(),
        args.node_name.clone(),
        started,
    )
    .with_health(health_rx.clone(), args.health_taint_effect)
    .with_nri(nri_outage)
    .with_coexistence(coexistence)
    .with_metrics(metrics.clone())
    .with_snapshot(args.state_dir.clone());
    daemon.spawn("publisher", publisher.run(inv_rx.clone()));
    daemon.spawn(
        "device-metrics",
        graft_driver::metrics::watch_devices(metrics.clone(), inv_rx.clone(), health_rx.clone()),
    );
    let discoveries = Arc::new(discoveries);
    watch_changes(&mut daemon, &discoveries, wake_tx);
    let rescans = rescan::Rescan {
        backends: discoveries,
        inventory,
        core: Arc::clone(edge.core()),
        state_dir: args.state_dir.clone(),
        every: Duration::from_secs(args.rescan_seconds.max(1)),
        events: events.clone(),
        node: args.node_name.clone(),
        metrics: metrics.clone(),
        restart: (!when_up.is_empty()).then(|| rescan::Restart {
            when_up,
            notify: Arc::clone(&restart),
        }),
        wake: wake_rx,
        out: inv_tx,
    };
    daemon.spawn("rescan", rescan::run(rescans));
    daemon.spawn(
        "cleanup",
        cleanup::run(
            Arc::clone(&edge),
            Duration::from_secs(args.cleanup_seconds.max(1)),
        ),
    );

    let paths = PluginPaths::new(
        &args.kubelet_dir,
        &args.driver_name,
        args.pod_uid.as_deref(),
    )?;
    let stop = async move {
        tokio::select! {
            _ = shutdown => {}
            _ = restart.notified() => {}
        }
    };
    let feed = plugin::resource_health::HealthFeed {
        pool: args.node_name.clone(),
        inventory: inv_rx,
        health: health_rx,
    };
    let served = plugin::serve(edge, &paths, registration, Some(feed), stop).await;
    // Tasks still running at the deadline are logged and aborted: the process stops anyway.
    let _overdue = daemon.shutdown(STOP_WAIT).await;
    // Held until the end: without a health source, the report stays live and empty.
    drop(health_tx);
    served?;
    Ok(())
}

/// The families `--discovery` names, each once, in its order.
/// `e`, after its Event on the Node when it is one an operator fixes on the node
/// (devices.toml, graft-hook's install).
async fn told(recorder: &Recorder, node: &str, e: anyhow::Error) -> anyhow::Error {
    if let Some(ev) = node_events::startup_failure(e.as_ref()) {
        node_events::post_before_exit(recorder, node, ev).await;
    }
    e
}

fn open(args: &Args, node: &Node) -> anyhow::Result<Vec<Box<dyn Backend>>> {
    let mut out: Vec<Box<dyn Backend>> = Vec::new();
    for &family in &args.discovery {
        if out.iter().any(|b| b.name() == family.name()) {
            continue;
        }
        out.push(family.open(node, &args.backends)?);
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

/// Rescans on changes in the watched directories: an inotify thread wakes the rescan task.
fn watch_changes(
    daemon: &mut Daemon,
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
            daemon.watch_thread("inotify", Ends::MayReturn, thread);
        }
        Err(e) => tracing::warn!(error = %e, "no change notification; periodic rescans only"),
    }
}
