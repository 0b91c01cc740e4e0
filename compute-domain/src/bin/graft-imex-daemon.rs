//! graft-imex-daemon: the IMEX daemon pod's entry point. Watches its domain's record, which
//! the controller writes in graft's namespace (never the domain's status, which the
//! domain's namespace may write), writes the IMEX config and a node list of fixed names,
//! maps the names to the members of its clique in the pod's /etc/hosts, and runs the
//! driver's `nvidia-imex` as its child: signalled (SIGUSR1, spaced as IMEX wants) to
//! re-resolve when a member changes, restarted only when the list must grow or this node's
//! place moved (`daemon::plan`), SIGTERM forwarded, and the pod fails when the child dies on
//! its own (the kubelet restarts it). `--check` is the readiness probe: ready only when
//! `nvidia-imex-ctl -q` prints exactly READY.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, ExitStatus, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use anyhow::{bail, Context as _};
use clap::Parser;
use futures::StreamExt;
use graft_compute_domain::daemon::{self, ImexFiles, Plan, Running, CONFIG_FILE, SIGNAL_SPACING};
use graft_compute_domain::objects::{daemon_name, DAEMON_CONFIG_DIR, DAEMON_DRIVER_ROOT};
use graft_compute_domain::record;
use graft_runtime::{Signals, Workers};
use graft_telemetry::logs::LogFormat;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// How long the IMEX daemon gets to shut down before it is killed.
const GRACE: Duration = Duration::from_secs(10);
/// How long `--check` waits for `nvidia-imex-ctl`.
const CHECK_LIMIT: Duration = Duration::from_secs(5);

#[derive(Parser)]
#[command(version = graft_telemetry::VERSION, about)]
struct Args {
    /// Readiness probe: exit 0 only when the IMEX daemon reports READY.
    #[arg(long)]
    check: bool,
    /// The domain's uid (a domain recreated under the same name is another domain).
    #[arg(long, env = "COMPUTE_DOMAIN_UID")]
    uid: Option<String>,
    /// The domain's name.
    #[arg(long, env = "COMPUTE_DOMAIN_NAME")]
    name: Option<String>,
    /// The domain's namespace.
    #[arg(long, env = "COMPUTE_DOMAIN_NAMESPACE")]
    namespace: Option<String>,
    /// Where the controller keeps the domain's record (default: this pod's namespace).
    #[arg(long, env = "GRAFT_RECORD_NAMESPACE")]
    record_namespace: Option<String>,
    /// The domain's size: IMEX starts once that many members are listed.
    #[arg(long, env = "COMPUTE_DOMAIN_NUM_NODES")]
    num_nodes: Option<usize>,
    /// The domain's clique: members of other cliques are ignored.
    #[arg(long, env = "COMPUTE_DOMAIN_CLIQUE")]
    clique: Option<String>,
    /// This node's name (for the logs).
    #[arg(long, env = "NODE_NAME", default_value = "")]
    node_name: String,
    /// This pod's address: the node's, with hostNetwork.
    #[arg(long, env = "POD_IP")]
    pod_ip: Option<IpAddr>,
    /// The driver root as mounted in the pod; nvidia-imex is in its usr/bin.
    #[arg(long, env = "GRAFT_DRIVER_ROOT", default_value = DAEMON_DRIVER_ROOT)]
    driver_root: PathBuf,
    /// The private directory for config.cfg and nodes_config.cfg.
    #[arg(long, env = "GRAFT_IMEX_DIR", default_value = DAEMON_CONFIG_DIR)]
    config_dir: PathBuf,
    /// IMEX's SERVER_PORT (its default).
    #[arg(long, env = "GRAFT_IMEX_SERVER_PORT", default_value_t = 50000)]
    server_port: u16,
    /// The hosts file nvidia-imex resolves the members' names through (the pod's own).
    #[arg(long, env = "GRAFT_IMEX_HOSTS_FILE", default_value = "/etc/hosts")]
    hosts_file: PathBuf,
    /// IMEX's IMEX_CMD_PORT (its default).
    #[arg(long, env = "GRAFT_IMEX_CMD_PORT", default_value_t = 50005)]
    cmd_port: u16,
    /// Log format: text or json.
    #[arg(long, env = "GRAFT_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.check {
        return match graft_runtime::block_on(Workers::PerCore, check(&args)) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    // Held until main returns, past the error's line below: dropping it writes out the
    // lines still buffered. Without it there is no log to say why, hence stderr.
    let _logs = match graft_runtime::init_logs(args.log_format, None) {
        Ok(logs) => logs,
        Err(e) => {
            eprintln!("{:#}", anyhow::Error::from(e));
            return ExitCode::FAILURE;
        }
    };
    let ran = graft_runtime::block_on(Workers::PerCore, run(args))
        .map_err(anyhow::Error::from)
        .and_then(|ran| ran);
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The readiness probe: prints what the ctl said, 0 only for exactly "READY\n".
async fn check(args: &Args) -> ExitCode {
    let ctl = args.driver_root.join("usr/bin/nvidia-imex-ctl");
    let out = Command::new(&ctl)
        .arg("-q")
        .arg("-c")
        .arg(args.config_dir.join(CONFIG_FILE))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(CHECK_LIMIT, out).await {
        Ok(Ok(out)) => {
            let said = String::from_utf8_lossy(&out.stdout);
            print!("{said}");
            eprint!("{}", String::from_utf8_lossy(&out.stderr));
            if out.status.success() && said == "READY\n" {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Ok(Err(e)) => {
            eprintln!("running {}: {e}", ctl.display());
            ExitCode::FAILURE
        }
        Err(_) => {
            eprintln!("{} did not answer within {CHECK_LIMIT:?}", ctl.display());
            ExitCode::FAILURE
        }
    }
}

/// The running IMEX daemon, what it runs with, and when it was last signalled.
struct Imex {
    child: Child,
    with: Running,
    signalled: Option<Instant>,
    /// A SIGUSR1 owed: IMEX ignores one within [`SIGNAL_SPACING`] of the last.
    due: Option<Instant>,
}

impl Imex {
    /// Asks it to re-resolve its peers now, or as soon as IMEX takes a signal again.
    fn resolve_again(&mut self) {
        let now = Instant::now();
        match self.signalled {
            Some(t) if now < t + SIGNAL_SPACING => self.due = Some(t + SIGNAL_SPACING),
            _ => self.signal(now),
        }
    }

    fn signal(&mut self, now: Instant) {
        self.due = None;
        self.signalled = Some(now);
        let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) else {
            return;
        };
        match kill(Pid::from_raw(pid), Signal::SIGUSR1) {
            Ok(()) => tracing::info!("nvidia-imex signalled to resolve its peers again"),
            Err(e) => tracing::warn!("SIGUSR1 to nvidia-imex: {e}"),
        }
    }
}

fn required<T>(v: Option<T>, what: &str) -> anyhow::Result<T> {
    v.with_context(|| format!("{what} is not set"))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let uid = required(args.uid, "COMPUTE_DOMAIN_UID")?;
    let name = required(args.name, "COMPUTE_DOMAIN_NAME")?;
    let namespace = required(args.namespace, "COMPUTE_DOMAIN_NAMESPACE")?;
    let num_nodes = required(args.num_nodes, "COMPUTE_DOMAIN_NUM_NODES")?;
    let clique = required(args.clique, "COMPUTE_DOMAIN_CLIQUE")?;
    let own = required(args.pod_ip, "POD_IP")?;
    let imex = args.driver_root.join("usr/bin/nvidia-imex");
    let hosts = args.hosts_file;
    let files = ImexFiles {
        dir: args.config_dir,
        bind_ip: own,
        server_port: args.server_port,
        cmd_port: args.cmd_port,
    };
    tracing::info!(domain = %format!("{namespace}/{name}"), %uid, node = %args.node_name,
                   %own, %clique, "watching the domain");
    let mut signals = Signals::install()?;
    let client = graft_api::client::connect("graft-imex-daemon")
        .await
        .context("connecting to the API server")?;
    let records = args
        .record_namespace
        .unwrap_or_else(|| client.default_namespace().to_string());
    let api: Api<ConfigMap> = Api::namespaced(client, &records);
    let record = daemon_name(&uid);
    tracing::info!(%records, %record, "reading the members from the domain's record");
    let mut events = watcher::watch_object(api, &record)
        .default_backoff()
        .boxed();
    let mut running: Option<Imex> = None;
    loop {
        let due = running.as_ref().and_then(|r| r.due);
        tokio::select! {
            // Logged ("terminating") as it comes.
            _ = signals.recv() => break,
            status = exited(&mut running) => {
                let status = status.context("waiting for nvidia-imex")?;
                bail!("nvidia-imex exited on its own ({status})");
            }
            _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                if let Some(r) = running.as_mut() {
                    r.signal(Instant::now());
                }
            }
            ev = events.next() => {
                let cm = match ev {
                    None => bail!("the watch of the domain's record ended"),
                    Some(Err(e)) => {
                        tracing::warn!("watching the domain's record: {e}");
                        continue;
                    }
                    Some(Ok(cm)) => cm,
                };
                let members = match cm.as_ref().map(record::nodes) {
                    Some(Ok(nodes)) => daemon::members(&nodes, &clique),
                    // Kept as it is: a record this cannot read changes nothing.
                    Some(Err(e)) => {
                        tracing::warn!("{e}");
                        continue;
                    }
                    // Gone: the domain was deleted, this node is in no domain.
                    None => Default::default(),
                };
                let now = running.as_ref().map(|r| &r.with);
                match daemon::plan(now, &members, own, num_nodes) {
                    Plan::Keep => {}
                    Plan::Stop => {
                        tracing::info!("this node left the domain: stopping nvidia-imex");
                        if let Some(r) = running.take() {
                            stop(r.child).await;
                        }
                    }
                    Plan::Remap(members) => {
                        let places = running.as_ref().map_or(0, |r| r.with.places);
                        let mapped = daemon::mapping(&members, places, num_nodes);
                        daemon::write_hosts(&hosts, &mapped)
                            .with_context(|| format!("mapping the members in {}", hosts.display()))?;
                        tracing::info!(?members, "members changed: names mapped anew");
                        if let Some(r) = running.as_mut() {
                            r.with.members = members;
                            r.resolve_again();
                        }
                    }
                    Plan::Run(with) => {
                        if let Some(r) = running.take() {
                            tracing::info!(old = ?r.with, new = ?with,
                                           "the node list or this node's place changed: \
                                            restarting nvidia-imex");
                            stop(r.child).await;
                        }
                        let mapped = daemon::mapping(&with.members, with.places, num_nodes);
                        daemon::write_hosts(&hosts, &mapped)
                            .with_context(|| format!("mapping the members in {}", hosts.display()))?;
                        let cfg = files.write(with.places).with_context(|| {
                            format!("writing the IMEX config in {}", files.dir.display())
                        })?;
                        let child = start(&imex, &cfg)?;
                        tracing::info!(?with, "nvidia-imex started");
                        running = Some(Imex { child, with, signalled: None, due: None });
                    }
                }
            }
        }
    }
    if let Some(r) = running.take() {
        stop(r.child).await;
    }
    Ok(())
}

/// The child's exit; never, while none runs.
async fn exited(running: &mut Option<Imex>) -> std::io::Result<ExitStatus> {
    match running {
        Some(r) => r.child.wait().await,
        None => std::future::pending().await,
    }
}

fn start(imex: &Path, cfg: &Path) -> anyhow::Result<Child> {
    Command::new(imex)
        .arg("-c")
        .arg(cfg)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", imex.display()))
}

/// SIGTERM (IMEX tells its peers it is going), SIGKILL after [`GRACE`].
async fn stop(mut child: Child) {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        if let Err(e) = kill(Pid::from_raw(pid), Signal::SIGTERM) {
            tracing::warn!("SIGTERM to nvidia-imex: {e}");
        }
    }
    match tokio::time::timeout(GRACE, child.wait()).await {
        Ok(Ok(status)) => tracing::info!("nvidia-imex stopped ({status})"),
        Ok(Err(e)) => tracing::warn!("waiting for nvidia-imex: {e}"),
        Err(_) => {
            tracing::warn!("nvidia-imex ignored SIGTERM for {GRACE:?}: killing it");
            if let Err(e) = child.kill().await {
                tracing::warn!("killing nvidia-imex: {e}");
            }
        }
    }
}
