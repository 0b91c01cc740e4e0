//! graft-scheduler-extender: kube-scheduler's `prioritize` for pods with graft GPU claims.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use graft_runtime::{Daemon, Signals, Telemetry, Workers};
use graft_scheduler_extender::listen::{bind, serve};
use graft_scheduler_extender::metrics::Metrics;
use graft_scheduler_extender::prioritize::View;
use graft_scheduler_extender::server::Shared;
use graft_scheduler_extender::watch::Caches;
use graft_scheduler_extender::{Config, Mode};
use graft_telemetry::logs::LogFormat;

#[derive(Parser)]
#[command(version = graft_telemetry::VERSION, about)]
struct Args {
    /// Where kube-scheduler calls the extender (its `urlPrefix`). The default answers on
    /// the loopback only: run it beside the scheduler (host network on the control plane).
    #[arg(long, env = "GRAFT_EXTENDER_ADDR", default_value = "127.0.0.1:8897")]
    listen: String,
    /// Where /metrics, /healthz and /readyz are served ("off": nowhere).
    #[arg(long, env = "GRAFT_METRICS_ADDR", default_value = ":9480")]
    metrics_addr: String,
    /// graft's DRA driver name, as its ResourceSlices give it.
    #[arg(long, default_value = graft_api::DRIVER)]
    driver: String,
    /// DeviceClasses whose requests are whole GPUs (repeat for more).
    #[arg(long = "gpu-class", default_value = graft_api::classes::GPU.name)]
    gpu_classes: Vec<String>,
    /// The Node label whose value names a node's pool, for the per-pool GPU and
    /// fragmentation gauges (nodes without it are in pool `none`).
    #[arg(
        long,
        env = "GRAFT_EXTENDER_POOL_LABEL",
        default_value = "node.kubernetes.io/instance-type"
    )]
    pool_label: String,
    /// `pack`: fill partly used nodes first; `spread`: keep load even.
    #[arg(long, env = "GRAFT_EXTENDER_MODE", default_value = "pack")]
    mode: Mode,
    /// The serving certificate chain (PEM): with --tls-key, the extender serves HTTPS, and
    /// kube-scheduler, trusting only the CA that signed it, believes nothing else on the
    /// port. Without, plain HTTP.
    #[arg(long, env = "GRAFT_EXTENDER_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The serving certificate's private key (PEM).
    #[arg(long, env = "GRAFT_EXTENDER_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// With HTTPS: answer only callers with a client certificate this CA (PEM) signed.
    #[arg(long, env = "GRAFT_EXTENDER_TLS_CLIENT_CA", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Log format: text or json.
    #[arg(long, env = "GRAFT_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

/// How long the tasks get to stop at shutdown.
const STOP_WAIT: Duration = Duration::from_secs(2);

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Held until main returns: dropping it writes out the lines still buffered.
    let _logs = graft_runtime::init_logs(args.log_format, None)?;
    graft_runtime::block_on(Workers::PerCore, run(args))?
}

async fn run(args: Args) -> anyhow::Result<()> {
    let listen = graft_telemetry::parse_addr(&args.listen)?
        .with_context(|| format!("--listen {:?}: the extender needs an address", args.listen))?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(
            graft_scheduler_extender::tls::acceptor(cert, key, args.tls_client_ca.as_deref())
                .context("loading the extender's TLS certificate")?,
        ),
        _ => {
            tracing::warn!("serving plain HTTP: kube-scheduler cannot tell this extender from anything else that takes its port; give --tls-cert and --tls-key");
            None
        }
    };
    let client = graft_api::client::connect("graft-scheduler-extender")
        .await
        .context("connecting to the API server")?;
    let mut telemetry = Telemetry::new("graft_scheduler_extender_build_info");
    let metrics = Metrics::register(telemetry.registry());
    let (caches, watching) = Caches::watch(client.clone(), &args.driver, &args.pool_label);
    let fleet =
        graft_scheduler_extender::metrics::keep_fleet(caches.index(), metrics.fleet.clone());
    // A qualified name, as the Events API asks of reportingController.
    let reporter = kube::runtime::events::Reporter {
        controller: "graft.dev/scheduler-extender".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let (notices, posting) = graft_scheduler_extender::events::poster(client, reporter);
    let probe = caches.clone();
    let ready: graft_telemetry::ReadyCheck = Arc::new(move || {
        if probe.ready() {
            Ok("caches filled".to_string())
        } else {
            Err(graft_telemetry::NotReady(
                "the ResourceSlice, ResourceClaim and Node watches have not listed yet".into(),
            ))
        }
    });
    telemetry
        .ready_when(ready)
        .serve(graft_telemetry::parse_addr(&args.metrics_addr)?, None);
    let listener = bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(%listen, scheme, client_certs = args.tls_client_ca.is_some(), mode = ?args.mode, classes = ?args.gpu_classes, "serving POST /prioritize");
    let shared = Shared {
        view: Arc::new(caches),
        config: Arc::new(Config {
            driver: args.driver,
            classes: args.gpu_classes,
            mode: args.mode,
        }),
        metrics,
        notices: Some(notices),
        announced: Arc::default(),
    };
    let mut signals = Signals::install()?;
    // The four run for the life of the process: one ending is an error naming it.
    let mut daemon = Daemon::new();
    daemon.spawn("extender-server", async move {
        serve(listener, tls, shared)
            .await
            .context("serving the extender")
    });
    daemon.spawn("watches", watching);
    daemon.spawn("event-poster", posting);
    daemon.spawn("fleet-gauges", fleet);
    daemon.run(&mut signals, STOP_WAIT).await?;
    Ok(())
}
