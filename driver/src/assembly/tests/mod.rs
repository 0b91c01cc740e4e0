//! Start-up run against a recording fake world: every seam ([`super::seams`]), every call
//! of a fake family ([`Backend`]) and every [`Point`] start-up passes goes into one
//! [`Trail`], so that a test reads the order start-up did things in. The state directory is
//! real (a temporary one, with a corrupt checkpoint slot that settling moves aside, which
//! the families look for); the API server is an address nothing listens on.

mod failures;
mod order;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clap::Parser;
use futures::future::BoxFuture;
use graft_driver::backend::{Backend, BackendError, Injection, Node, Running};
use graft_driver::claims::checkpoint::{default_dir, Checkpoint};
use graft_driver::claims::Core;
use graft_driver::daemon::Daemon;
use graft_driver::discovery::nvidia::backend::INSTALLING_HOOK;
use graft_driver::discovery::Discovery;
use graft_driver::edge::Edge;
use graft_driver::error::DriverError;
use graft_driver::events::{Poster, Posting};
use graft_driver::families::{Family, Flags};
use graft_driver::model::Device;
use graft_driver::plugin::registration::RegistrationState;
use graft_driver::plugin::resource_health::HealthFeed;
use graft_driver::plugin::PluginPaths;
use graft_runtime::Telemetry;
use kube::runtime::events::Event;
use tokio::sync::{mpsc, Notify};

use super::seams::{Cluster, Families, Kubelet, NodeEvents, Point, Probes, Watch};
use crate::args::Args;

const NODE: &str = "node-a";
const BOOT: &str = "boot-1";
/// A checkpoint slot that fails its checks.
const CORRUPT: &str = "not a checkpoint";

/// What happened, in order.
#[derive(Clone, Default)]
struct Trail(Arc<Mutex<Vec<String>>>);

impl Trail {
    fn push(&self, what: impl Into<String>) {
        self.0.lock().unwrap().push(what.into());
    }

    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Pushes its line when dropped: a task's future, when its task is stopped.
struct OnDrop(Trail, String);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.push(std::mem::take(&mut self.1));
    }
}

/// A task that runs until stopped, and says so in `stopped` (even if never polled).
fn until_stopped(stopped: Trail, name: &str) -> impl std::future::Future<Output = ()> {
    let said = OnDrop(stopped, name.to_string());
    async move {
        let _said = said;
        std::future::pending::<()>().await
    }
}

/// A family's failure, as the real ones fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// devices.toml refused (an operator fixes it on the node: told).
    DevicesToml,
    /// graft-hook could not be installed (told).
    HookInstall,
    /// Anything else (the pod's log and restarts say it: not told).
    Other,
}

impl Fault {
    fn error(self, family: &'static str) -> BackendError {
        match self {
            Fault::DevicesToml => BackendError::Discovery(DriverError::Config {
                path: "/etc/graft/devices.toml".into(),
                reason: "devices[0]: no path".into(),
            }),
            Fault::HookInstall => BackendError::step(
                family,
                INSTALLING_HOOK,
                std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    "read-only file system",
                ),
            ),
            Fault::Other => BackendError::step(family, "loading NVML", "library not found"),
        }
    }
}

/// What a fake family does besides recording its calls.
#[derive(Debug, Clone, Copy, Default)]
struct Script {
    open: Option<Fault>,
    before_scan: Option<Fault>,
    start: Option<Fault>,
    /// Its injection names this ldconfig.
    ldconfig: Option<&'static str>,
    /// It could not start everything: it asks for a restart once its scan works.
    restart_when_up: bool,
}

/// The world start-up runs in, recording.
#[derive(Default)]
struct FakeWorld {
    trail: Trail,
    /// The tasks stopped, by name (the order in which a shutdown stops them is its own).
    stopped: Trail,
    /// Scripts of the families, by name; a family not listed just records.
    scripts: BTreeMap<&'static str, Script>,
    /// No client configuration: start-up cannot reach the API server.
    no_client: bool,
    /// The kubelet plugin's socket cannot be served.
    plugin_fails: bool,
    /// Notified once the kubelet plugin serves.
    serving: Arc<Notify>,
    /// The Events queued for the Node while the driver runs.
    queued: Arc<Mutex<Option<mpsc::Receiver<Posting>>>>,
    /// The corrupt checkpoint slot that settling the checkpoint moves aside.
    slot: PathBuf,
}

impl FakeWorld {
    /// The Events queued for the Node so far, by reason.
    fn queued(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(rx) = self.queued.lock().unwrap().as_mut() {
            while let Ok((ev, _)) = rx.try_recv() {
                out.push(ev.reason);
            }
        }
        out
    }
}

/// What a family sees of the checkpoint: "settled" once the corrupt slot is moved aside (a
/// rebuilt checkpoint may be written in its place).
fn checkpoint(slot: &Path) -> &'static str {
    if std::fs::read(slot).is_ok_and(|d| d == CORRUPT.as_bytes()) {
        "checkpoint not settled"
    } else {
        "checkpoint settled"
    }
}

impl Probes for FakeWorld {
    fn serve_probes(&self, _telemetry: Telemetry, _tcp: Option<std::net::SocketAddr>, _: &Path) {
        self.trail.push("probes served");
    }
}

#[async_trait]
impl Cluster for FakeWorld {
    async fn client(&self) -> anyhow::Result<kube::Client> {
        self.trail.push("client");
        if self.no_client {
            anyhow::bail!("no Kubernetes client configuration (in-cluster or KUBECONFIG)");
        }
        // Nothing listens there: the tasks that call the API server fail and retry.
        let config = kube::Config::new("http://127.0.0.1:1".parse()?);
        Ok(kube::Client::try_from(config)?)
    }

    fn node_events(&self, _client: &kube::Client, _node: &str) -> Box<dyn NodeEvents> {
        Box::new(FakeEvents {
            trail: self.trail.clone(),
            stopped: self.stopped.clone(),
            queued: Arc::clone(&self.queued),
        })
    }
}

struct FakeEvents {
    trail: Trail,
    stopped: Trail,
    queued: Arc<Mutex<Option<mpsc::Receiver<Posting>>>>,
}

#[async_trait]
impl NodeEvents for FakeEvents {
    async fn before_exit(&self, ev: Event) {
        self.trail.push(format!("told {}", ev.reason));
    }

    fn poster(self: Box<Self>) -> (Poster, BoxFuture<'static, ()>) {
        let (poster, rx) = Poster::channel(64);
        *self.queued.lock().unwrap() = Some(rx);
        (
            poster,
            Box::pin(until_stopped(self.stopped, "event-poster")),
        )
    }
}

impl Families for FakeWorld {
    fn open(
        &self,
        family: Family,
        _node: &Node,
        _flags: &Flags,
    ) -> Result<Box<dyn Backend>, BackendError> {
        let name = family.name();
        self.trail.push(format!("open {name}"));
        let script = self.scripts.get(name).copied().unwrap_or_default();
        if let Some(fault) = script.open {
            return Err(fault.error(name));
        }
        Ok(Box::new(FakeFamily {
            name,
            script,
            trail: self.trail.clone(),
            stopped: self.stopped.clone(),
            slot: self.slot.clone(),
            discovery: Some(FakeDiscovery {
                name,
                trail: self.trail.clone(),
            }),
        }))
    }
}

#[async_trait]
impl Kubelet for FakeWorld {
    async fn serve_plugin(
        &self,
        _edge: Arc<Edge>,
        _paths: &PluginPaths,
        _registration: Arc<Mutex<RegistrationState>>,
        _health: HealthFeed,
        stop: BoxFuture<'static, ()>,
    ) -> graft_driver::Result<()> {
        self.trail.push("plugin serving");
        if self.plugin_fails {
            return Err(DriverError::Socket {
                path: "dra.sock".into(),
                reason: "address in use".into(),
            });
        }
        self.serving.notify_one();
        stop.await;
        self.trail.push("plugin stopped");
        Ok(())
    }
}

impl Watch for FakeWorld {
    fn at(&self, point: Point) {
        self.trail.push(match point {
            Point::Core => "core made".to_string(),
            Point::Settled => "checkpoint settled".to_string(),
            Point::Task(name) => format!("task {name}"),
        });
    }
}

/// A device family that records each call the assembly makes.
struct FakeFamily {
    name: &'static str,
    script: Script,
    trail: Trail,
    stopped: Trail,
    slot: PathBuf,
    discovery: Option<FakeDiscovery>,
}

#[async_trait]
impl Backend for FakeFamily {
    fn name(&self) -> &'static str {
        self.name
    }

    fn injection(&self) -> Option<Injection> {
        self.trail.push(format!("injection {}", self.name));
        self.script.ldconfig.map(|ldconfig| Injection {
            mount_roots: vec!["/usr/lib/fake".into()],
            ldconfig: ldconfig.into(),
        })
    }

    fn before_scan(&mut self, _core: &Core) -> Result<(), BackendError> {
        let seen = checkpoint(&self.slot);
        self.trail
            .push(format!("before_scan {} ({seen})", self.name));
        self.script
            .before_scan
            .map_or(Ok(()), |f| Err(f.error(self.name)))
    }

    fn take_discovery(&mut self) -> Option<Box<dyn Discovery>> {
        self.trail.push(format!("take_discovery {}", self.name));
        self.discovery
            .take()
            .map(|d| Box::new(d) as Box<dyn Discovery>)
    }

    fn route(&self) -> Option<graft_driver::backend::router::Route> {
        self.trail.push(format!("route {}", self.name));
        None
    }

    async fn after_startup(&self, _core: Arc<Core>) {
        let seen = checkpoint(&self.slot);
        self.trail
            .push(format!("after_startup {} ({seen})", self.name));
    }

    fn start(&mut self, daemon: &mut Daemon, _running: &Running<'_>) -> Result<(), BackendError> {
        self.trail.push(format!("start {}", self.name));
        if let Some(f) = self.script.start {
            return Err(f.error(self.name));
        }
        daemon.spawn(self.name, until_stopped(self.stopped.clone(), self.name));
        Ok(())
    }

    fn restart_when_up(&self) -> Option<&'static str> {
        self.trail.push(format!("restart_when_up {}", self.name));
        self.script
            .restart_when_up
            .then_some("the fake family is up: restarting to start the rest")
    }
}

/// A discovery that finds nothing, and says when it looked.
struct FakeDiscovery {
    name: &'static str,
    trail: Trail,
}

impl Discovery for FakeDiscovery {
    fn name(&self) -> &'static str {
        self.name
    }

    fn discover(&self) -> graft_driver::Result<Vec<Device>> {
        self.trail.push(format!("discover {}", self.name));
        Ok(Vec::new())
    }
}

/// A node's directories, and the world start-up runs in there.
struct Fixture {
    dir: tempfile::TempDir,
    world: FakeWorld,
}

impl Fixture {
    /// A state directory whose checkpoint has a corrupt slot, and a boot id.
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("boot_id"), format!("{BOOT}\n")).unwrap();
        let state = dir.path().join("state");
        let slots = Checkpoint::new(default_dir(&state), BOOT).unwrap().paths();
        std::fs::write(&slots[0], CORRUPT).unwrap();
        let world = FakeWorld {
            slot: slots[0].clone(),
            ..FakeWorld::default()
        };
        Fixture { dir, world }
    }

    /// With `family` following `script`.
    fn scripted(mut self, family: &'static str, script: Script) -> Self {
        self.world.scripts.insert(family, script);
        self
    }

    /// graft-driver's flags for this node, as `more` changes them (`@name`: `name` in the
    /// node's directory).
    fn args(&self, more: &[&str]) -> Args {
        let at = |p: &str| self.dir.path().join(p).display().to_string();
        let mut argv: Vec<String> = vec!["graft-driver".into(), "--node-name".into(), NODE.into()];
        for (flag, value) in [
            ("--metrics-addr", "off".to_string()),
            ("--discovery", "char".to_string()),
            ("--state-dir", at("state")),
            ("--kubelet-dir", at("kubelet")),
            ("--boot-id-path", at("boot_id")),
            ("--health-socket", at("driver.sock")),
            ("--device-config", at("devices.toml")),
        ] {
            if !more.contains(&flag) {
                argv.extend([flag.to_string(), value]);
            }
        }
        argv.extend(more.iter().map(|s| match s.strip_prefix('@') {
            Some(name) => at(name),
            None => s.to_string(),
        }));
        Args::try_parse_from(argv).unwrap()
    }

    /// Runs start-up with `more` flags until `shutdown`, a restart request, or a failure.
    async fn run(
        &self,
        more: &[&str],
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let run = super::run_in(&self.world, self.args(more), Instant::now(), shutdown);
        tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .expect("start-up ends within 30 s")
    }

    /// Runs start-up with `more` flags, signalled once the plugin serves.
    async fn run_until_serving(&self, more: &[&str]) -> anyhow::Result<()> {
        let serving = Arc::clone(&self.world.serving);
        self.run(more, async move { serving.notified().await })
            .await
    }
}
