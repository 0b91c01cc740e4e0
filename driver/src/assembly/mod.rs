//! graft-driver's start-up, in an order that matters: the probe endpoints first (liveness
//! answers throughout); the families opened and graft-nri's policy built from them before
//! the core; each family's work before the first scan (the MIG ledger seeded from the
//! checkpoint, graft-hook installed); the checkpoint settled before any family's work that
//! reads it (the MPS shares); the long-running tasks, each a named task of one [`Daemon`]
//! (the Event poster and the state-directory watchers before the checkpoint settles, the
//! rest once it has and the families have started theirs); then the kubelet plugin until
//! a signal or a restart request, after which the tasks are stopped.
//!
//! A family that fails to open or to do its work before the first scan ends start-up, told
//! on the Node first when an operator fixes it there (devices.toml, graft-hook's install).
//! A family that could not start everything asks for one clean restart once its scan works.
//!
//! What start-up needs of the world outside the process is behind [`seams`], so that the
//! tests (`tests`) run it against a recording fake and hold it to this order.
//!
//! [`Daemon`]: graft_driver::daemon::Daemon

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use graft_driver::backend::router::Router;
use graft_driver::backend::Running;
use graft_driver::claims::seams::{KillAt, NriGate, StatusFile};
use graft_driver::discovery::report;
use graft_driver::edge::{Edge, PodCache, KUBELET_DEADLINE};
use graft_driver::events::node as node_events;
use graft_driver::events::node_ref;
use graft_driver::health::HealthReport;
use graft_driver::metrics::DriverMetrics;
use graft_driver::model::{FamilyTaints, Holds};
use graft_driver::plugin::registration::RegistrationState;
use graft_driver::plugin::{self, PluginPaths};
use graft_driver::publisher::Publisher;

use crate::args::Args;
use crate::{cleanup, endpoints, rescan};

mod seams;
mod steps;
#[cfg(test)]
mod tests;

use seams::{Real, World};
use steps::{FirstScan, Tasks};

/// How long the tasks get to stop at shutdown.
const STOP_WAIT: Duration = Duration::from_secs(2);
/// How often the state disk's write-back is checked: a disk error refuses new claims within
/// this long (records are not synced on the prepare path; see graft-record's `durability`).
const WRITEBACK_EVERY: Duration = Duration::from_secs(5);

/// Runs graft-driver until `shutdown` resolves (a signal) or a family asks for a restart.
pub async fn run(
    args: Args,
    started: Instant,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    run_in(&Real, args, started, shutdown).await
}

/// [`run`], in `world`.
async fn run_in(
    world: &dyn World,
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
    let daemon = graft_driver::daemon::counted(metrics.clone());
    world.serve_probes(
        endpoints::telemetry(&metrics, registration.clone(), daemon.ended()),
        graft_telemetry::parse_addr(&args.metrics_addr)?,
        &args.health_socket,
    );
    let mut tasks = Tasks::new(daemon, world);

    let boot_id = graft_record::read_boot_id(&args.boot_id_path)?;
    // Rescan requests: from inotify, and from setups that change what the node offers.
    let (wake_tx, wake_rx) = tokio::sync::mpsc::channel(1);
    let node = steps::node(&args, &metrics, wake_tx.clone());
    // Made before the families open (no request yet): a start-up that fails on devices.toml
    // or graft-hook's install says so on the Node before the process ends.
    let client = world.client().await?;
    let recorder = world.node_events(&client, &args.node_name);
    let (mut backends, mut core) =
        steps::families(world, &args, &node, &boot_id, recorder.as_ref()).await?;
    let scan = FirstScan::of(&mut backends, &metrics);
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
    core.set_inventory(&scan.devices);
    let margin = Duration::from_secs(args.deadline_margin_seconds);
    if margin >= KUBELET_DEADLINE {
        bail!(
            "--deadline-margin-seconds {}: must be below the kubelet's {} s",
            margin.as_secs(),
            KUBELET_DEADLINE.as_secs()
        );
    }
    let (events, posting) = recorder.poster();
    tasks.spawn("event-poster", posting);
    report::post(&scan.changes, &events, &args.node_name);
    let mut pods = PodCache::default();
    if args.pod_cache {
        let (cache, watching) = PodCache::watch(client.clone(), &args.node_name);
        tasks.spawn("pod-cache", watching);
        pods = cache;
    }
    let edge = Arc::new(
        Edge::new(Arc::new(core), client.clone(), KUBELET_DEADLINE - margin)
            .with_pod_cache(pods)
            .with_events(events.clone())
            .with_metrics(metrics.clone()),
    );
    let (nri_outage_tx, nri_outage) = tokio::sync::watch::channel(None);
    tasks.spawn(
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
    tasks.spawn(
        "refusal-events",
        graft_driver::events::refusals::run(events.clone(), args.state_dir.clone()),
    );
    if let Some(r) = edge.startup().await.context("settling the checkpoint")? {
        events.post(
            node_events::checkpoint_rebuilt(&r),
            node_ref(&args.node_name),
        );
    }
    world.at(seams::Point::Settled);
    for b in &backends {
        b.after_startup(Arc::clone(edge.core())).await;
    }
    rescan::refresh_absent(args.state_dir.clone(), scan.devices.clone()).await;
    let nri_status = StatusFile {
        state_dir: args.state_dir.clone(),
        boot_id: boot_id.clone(),
    };
    tasks.spawn(
        "claim-counts",
        graft_driver::metrics::keep_counts(
            metrics.clone(),
            Arc::clone(edge.core()),
            Arc::new(move || nri_status.ready().is_ok()),
            Duration::from_secs(15),
        ),
    );

    let (inv_tx, inv_rx) = tokio::sync::watch::channel(scan.devices);
    // Device health: from the families that watch it (NVIDIA: NVML events); without one
    // every device stays healthy and the channel only feeds the kubelet's health stream.
    let (health_tx, health_rx) = tokio::sync::watch::channel(HealthReport::default());
    // What the families hold back from the slices (NVIDIA: GPUs beside its device plugin),
    // set in their `start`, before the publisher's first look.
    let (holds_tx, holds_rx) = tokio::sync::watch::channel(Holds::default());
    // What the families taint their own devices with (NVIDIA: MPS tenants).
    let (taints_tx, taints_rx) = tokio::sync::watch::channel(FamilyTaints::default());
    // What the families measure of their devices, attributed to claims for the metrics.
    let (usage_tx, usage_rx) =
        tokio::sync::watch::channel(graft_driver::usage::UsageReport::default());
    tasks.spawn(
        "usage-metrics",
        graft_driver::metrics::usage::run(
            metrics.usage(),
            Arc::clone(edge.core()),
            args.state_dir.clone(),
            usage_rx,
        ),
    );
    let running = Running {
        client: client.clone(),
        node: &node,
        boot_id: &boot_id,
        inventory: inv_rx.clone(),
        health: &health_tx,
        holds: &holds_tx,
        taints: &taints_tx,
        events: &events,
        usage: &usage_tx,
    };
    for b in &mut backends {
        b.start(&mut tasks.daemon, &running)?;
    }
    let publisher = Publisher::new(
        client,
        args.driver_name.clone(),
        args.node_name.clone(),
        started,
    )
    .with_health(health_rx.clone(), args.health_taint_effect)
    .with_nri(nri_outage)
    .with_holds(holds_rx)
    .with_family_taints(taints_rx)
    .with_metrics(metrics.clone())
    .with_snapshot(args.state_dir.clone());
    tasks.spawn("publisher", publisher.run(inv_rx.clone()));
    let health_reasons = backends
        .iter()
        .flat_map(|b| b.health_reasons())
        .copied()
        .collect();
    tasks.spawn(
        "device-metrics",
        graft_driver::metrics::watch_devices(
            metrics.clone(),
            inv_rx.clone(),
            health_rx.clone(),
            health_reasons,
        ),
    );
    let discoveries = Arc::new(scan.discoveries);
    tasks.watch_changes(&discoveries, wake_tx);
    let rescans = rescan::Rescan {
        backends: discoveries,
        inventory: scan.inventory,
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
    tasks.spawn("rescan", rescan::run(rescans));
    tasks.spawn(
        "cleanup",
        cleanup::run(
            Arc::clone(&edge),
            Duration::from_secs(args.cleanup_seconds.max(1)),
        ),
    );
    tasks.spawn(
        "writeback-check",
        cleanup::check_writeback(
            edge.core().writeback(),
            WRITEBACK_EVERY,
            events.clone(),
            node_ref(&args.node_name),
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
    let served = world
        .serve_plugin(edge, &paths, registration, feed, Box::pin(stop))
        .await;
    // Tasks still running at the deadline are logged and aborted: the process stops anyway.
    let _overdue = tasks.daemon.shutdown(STOP_WAIT).await;
    // Held until the end: without a health source, the report stays live and empty.
    drop(health_tx);
    served?;
    Ok(())
}
