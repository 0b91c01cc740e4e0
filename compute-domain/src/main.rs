//! graft-compute-domain-controller: reconciles ComputeDomains while it holds its Lease.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use graft_compute_domain::metrics::Metrics;
use graft_compute_domain::{run_elected, Context, DaemonConfig, Election, SlotPolicy};
use graft_runtime::{Signals, Telemetry, Workers};
use graft_telemetry::logs::LogFormat;
use kube::runtime::events::Reporter;

#[derive(Parser)]
#[command(version = graft_telemetry::VERSION, about)]
struct Args {
    /// graft's namespace: the Lease, the IMEX daemons and their claim templates.
    #[arg(long, env = "POD_NAMESPACE", default_value = "graft-system")]
    namespace: String,
    /// This replica's identity in the Lease (its pod name).
    #[arg(
        long,
        env = "POD_NAME",
        default_value = "graft-compute-domain-controller"
    )]
    identity: String,
    /// The Lease's name.
    #[arg(long, default_value = "graft-compute-domain-controller")]
    lease: String,
    /// Seconds the Lease holds without renewal.
    #[arg(long, default_value_t = 15)]
    lease_seconds: u64,
    /// The IMEX daemon's image (required to run).
    #[arg(long, env = "GRAFT_IMEX_IMAGE")]
    daemon_image: Option<String>,
    /// Print the chart's CRD template (templates/70-compute-domain-crd.yaml) and exit.
    #[arg(long)]
    print_crd: bool,
    /// The IMEX daemon's command (repeat for arguments).
    #[arg(long = "daemon-command", default_value = "graft-imex-daemon")]
    daemon_command: Vec<String>,
    /// The IMEX daemon pods' ServiceAccount (they read their domain).
    #[arg(long)]
    daemon_service_account: Option<String>,
    /// The NVIDIA driver root on the hosts, mounted read-only into the IMEX daemon pods.
    #[arg(long, default_value = "/")]
    daemon_driver_root: String,
    /// The IMEX daemon pods' tolerations, as a JSON list of Kubernetes tolerations
    /// (default: the NoSchedule taint nvidia.com/gpu of GPU node pools).
    #[arg(long, env = "GRAFT_IMEX_TOLERATIONS")]
    daemon_tolerations: Option<String>,
    /// The DeviceClass of workload IMEX channels.
    #[arg(long, default_value = graft_api::classes::IMEX_CHANNEL.name)]
    channel_class: String,
    /// Where /metrics, /healthz and /readyz are served ("off": nowhere).
    #[arg(long, env = "GRAFT_METRICS_ADDR", default_value = ":9479")]
    metrics_addr: String,
    /// The most slots the domains of one namespace hold at once (0: no limit).
    #[arg(long, default_value_t = SlotPolicy::default().per_namespace)]
    max_slots_per_namespace: usize,
    /// Seconds a domain with no workload claim keeps a slot another domain waits for.
    #[arg(long, default_value_t = SlotPolicy::default().idle_grace.as_secs())]
    idle_slot_grace_seconds: u64,
    /// Seconds a pod allocated a domain's channel waits to be bound for the domain's IMEX
    /// daemon on its node to turn Ready; past them the binding fails and the scheduler
    /// places the pod again (kube-scheduler's own limit, bindingTimeout, is 600 s).
    #[arg(long, default_value_t = 300)]
    binding_timeout_seconds: u64,
    /// Reconcile the domains of this namespace only (default: every namespace).
    #[arg(long)]
    watch_namespace: Option<String>,
    /// Log format: text or json.
    #[arg(long, env = "GRAFT_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    if args.print_crd {
        print!("{}", graft_compute_domain::crd::crd_template()?);
        return Ok(());
    }
    let Some(image) = args.daemon_image.take() else {
        anyhow::bail!("--daemon-image (GRAFT_IMEX_IMAGE) is required");
    };
    // Held until main returns: dropping it writes out the lines still buffered.
    let _logs = graft_runtime::init_logs(args.log_format, None)?;
    graft_runtime::block_on(Workers::PerCore, run(args, image))?
}

async fn run(args: Args, image: String) -> anyhow::Result<()> {
    let mut signals = Signals::install()?;
    let client = graft_api::client::connect("graft-compute-domain-controller")
        .await
        .context("connecting to the API server")?;
    let mut telemetry = Telemetry::new("graft_compute_domain_build_info");
    let metrics = Metrics::register(telemetry.registry());
    // No readiness check: /readyz answers "ok" whenever the server answers.
    telemetry.serve(graft_telemetry::parse_addr(&args.metrics_addr)?, None);
    let defaults = DaemonConfig::default();
    let tolerations = match &args.daemon_tolerations {
        Some(json) => serde_json::from_str(json)
            .with_context(|| format!("--daemon-tolerations (GRAFT_IMEX_TOLERATIONS) {json:?}"))?,
        None => defaults.tolerations.clone(),
    };
    let cfg = DaemonConfig {
        namespace: args.namespace.clone(),
        image,
        command: args.daemon_command,
        channel_class: args.channel_class,
        service_account: args.daemon_service_account,
        driver_root: args.daemon_driver_root,
        tolerations,
        ..defaults
    };
    // A qualified name, as the Events API asks of reportingController.
    let reporter = Reporter {
        controller: "graft.dev/compute-domain-controller".into(),
        instance: Some(args.identity.clone()),
    };
    let policy = SlotPolicy {
        per_namespace: args.max_slots_per_namespace,
        idle_grace: Duration::from_secs(args.idle_slot_grace_seconds),
    };
    let mut ctx = Context::new(client, cfg, metrics, reporter)
        .with_slot_policy(policy)
        .with_binding_timeout(Duration::from_secs(args.binding_timeout_seconds.max(1)));
    if let Some(ns) = &args.watch_namespace {
        ctx = ctx.only_namespace(ns);
    }
    let ctx = Arc::new(ctx);
    let election = Election {
        namespace: args.namespace,
        name: args.lease,
        identity: args.identity,
        duration: Duration::from_secs(args.lease_seconds.max(2)),
        retry: Duration::from_secs((args.lease_seconds / 5).max(1)),
    };
    let shutdown = async move {
        signals.recv().await;
    };
    run_elected(ctx, election, shutdown).await;
    Ok(())
}
