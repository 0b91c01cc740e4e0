//! The single-node cluster of `integration/testbed/cluster/`, with graft installed from
//! its Helm chart (`deploy/helm/graft`) as a DaemonSet, driven through kubectl and crictl.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use serde_json::Value;

use crate::testbed::Testbed;

pub mod gpu;
pub mod multi;
pub mod workloads;

/// How long the waits of these tests last.
pub const WAIT: Duration = Duration::from_secs(120);

/// Which Kubernetes the testbed's cluster runs (cluster.sh's `GRAFT_CLUSTER_K8S`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kubernetes {
    /// The newest release the testbed builds (setup.sh's `GRAFT_K8S`, 1.37).
    Newest,
    /// The oldest minor graft supports (setup.sh's `GRAFT_K8S_134`), with the gates
    /// README's support table says to turn on there.
    V1_34,
}

impl Kubernetes {
    /// cluster.sh's and deploy-graft.sh's `GRAFT_CLUSTER_K8S` for it.
    fn env(self) -> &'static str {
        match self {
            Kubernetes::Newest => "1.37",
            Kubernetes::V1_34 => "1.34",
        }
    }
}

/// The testbed's cluster, with graft deployed; taken down on drop unless `GRAFT_KEEP_CLUSTER`
/// is set.
pub struct Cluster {
    k8s: Kubernetes,
    scripts: PathBuf,
    kubectl: PathBuf,
    helm: PathBuf,
    crictl: PathBuf,
    /// A kubeconfig for it.
    pub kubeconfig: PathBuf,
    endpoint: String,
}

/// Runs `cmd`: its stdout, or an error with its stderr.
pub fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `bash SCRIPT` of integration/testbed/cluster/ for a cluster on `k8s`.
pub(crate) fn script(scripts: &Path, name: &str, k8s: Kubernetes) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg(scripts.join(name))
        .env("GRAFT_CLUSTER_K8S", k8s.env());
    cmd
}

/// What graft keeps of prepared claims on the host.
const PREPARED_CLAIMS: [&str; 2] = ["/var/lib/graft/claims", "/var/lib/graft/driver"];

/// Removes graft's claim records and checkpoint from the host: for a cluster left behind
/// (a failed test, README's demo), whose claims no kubelet of the next cluster will
/// unprepare.
pub fn forget_prepared_claims() {
    for leftover in PREPARED_CLAIMS {
        let p = Path::new(leftover);
        let _ = if p.is_dir() {
            std::fs::remove_dir_all(p)
        } else {
            std::fs::remove_file(p)
        };
    }
}

impl Cluster {
    /// Which Kubernetes it runs.
    pub fn k8s(&self) -> Kubernetes {
        self.k8s
    }

    /// Brings the cluster up with graft from `target/debug`.
    pub fn up() -> anyhow::Result<Self> {
        Self::up_on(Kubernetes::Newest)
    }

    /// [`Cluster::up`] on the Kubernetes `k8s`.
    pub fn up_on(k8s: Kubernetes) -> anyhow::Result<Self> {
        let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        Self::up_full(k8s, &top.join("target/debug"), None)
    }

    /// [`Cluster::up`] with graft from the binaries in `bin` and, if given, `devices_toml`
    /// as its devices config (see [`Cluster::deploy_graft_with`]).
    pub fn up_with(bin: &Path, devices_toml: Option<&Path>) -> anyhow::Result<Self> {
        Self::up_full(Kubernetes::Newest, bin, devices_toml)
    }

    /// A fresh cluster on `k8s` without graft, for a test that installs it as a user would.
    pub fn up_without_graft(k8s: Kubernetes) -> anyhow::Result<Self> {
        Self::start(k8s)
    }

    fn up_full(k8s: Kubernetes, bin: &Path, devices_toml: Option<&Path>) -> anyhow::Result<Self> {
        let c = Self::start(k8s)?;
        c.deploy_graft_with(bin, devices_toml)?;
        Ok(c)
    }

    fn start(k8s: Kubernetes) -> anyhow::Result<Self> {
        let tb = Testbed::load()?;
        let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let scripts = top.join("integration/testbed/cluster");
        let already = script(&scripts, "cluster.sh", k8s)
            .arg("status")
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if already {
            // A cluster left up (README's demo leaves its pod holding the node's only
            // /dev/fuse): the test needs a known state, and says what it does about it.
            eprintln!(
                "cluster test: a testbed cluster is already running (the demo leaves one up); \
                 taking it down to start a fresh one, which is taken down at the end \
                 (GRAFT_KEEP_CLUSTER=1 keeps it)"
            );
            run(script(&scripts, "cluster.sh", k8s).arg("down"))?;
            // `down` keeps /var/lib/graft when it was there before that cluster's `up`: the
            // claims graft prepared for it would hold their devices in the new one, whose
            // kubelet never heard of them and so never unprepares them.
            forget_prepared_claims();
        }
        run(script(&scripts, "cluster.sh", k8s).arg("up"))?;
        let bins = match k8s {
            Kubernetes::Newest => &tb.k8s,
            Kubernetes::V1_34 => &tb.k8s_134,
        };
        let c = Cluster {
            kubectl: bins.join("kubectl"),
            k8s,
            helm: tb.helm.clone(),
            crictl: tb.crictl.clone(),
            kubeconfig: PathBuf::from("/var/lib/graft-cluster/admin.kubeconfig"),
            endpoint: "unix:///run/graft-cluster/containerd.sock".into(),
            scripts,
        };
        Ok(c)
    }

    /// Restarts one node component (`kubelet` or `containerd`) and waits for the node.
    pub fn restart(&self, component: &str) -> anyhow::Result<()> {
        run(script(&self.scripts, "cluster.sh", self.k8s).args(["restart", component]))?;
        Ok(())
    }

    /// (Re)installs graft from the chart with its default values (what `deploy/graft/`
    /// holds) and the debug binaries; returns once its ResourceSlice is published.
    pub fn deploy_graft(&self) -> anyhow::Result<()> {
        let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        self.deploy_graft_with(&top.join("target/debug"), None)
    }

    /// (Re)installs graft from the binaries in `bin` (the benchmarks use the release
    /// build), with `devices_toml` as the chart's devicesToml value if given.
    pub fn deploy_graft_with(&self, bin: &Path, devices_toml: Option<&Path>) -> anyhow::Result<()> {
        let mut cmd = script(&self.scripts, "deploy-graft.sh", self.k8s);
        cmd.arg(bin);
        if let Some(toml) = devices_toml {
            cmd.env("GRAFT_DEVICES_TOML", toml);
        }
        run(&mut cmd)?;
        Ok(())
    }

    /// A client with the cluster's admin credentials.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig)?;
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        Ok(kube::Client::try_from(cfg)?)
    }

    /// helm with the cluster's admin credentials.
    pub fn helm(&self, args: &[&str]) -> anyhow::Result<String> {
        run(Command::new(&self.helm)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args))
    }

    /// Runs kubectl against the cluster.
    pub fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        run(Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args))
    }

    /// Where graft serves metrics on this node over TCP: the chart binds its pod's IP (the
    /// node's, with hostNetwork), not every address.
    pub fn metrics_addr(&self, port: u16) -> anyhow::Result<String> {
        let ip = self.kubectl(&[
            "get",
            "pods",
            "-n",
            "graft-system",
            "-l",
            "app.kubernetes.io/name=graft",
            "-o",
            "jsonpath={.items[0].status.podIP}",
        ])?;
        let ip: std::net::IpAddr = ip
            .trim()
            .parse()
            .with_context(|| format!("pod IP {ip:?}"))?;
        Ok(std::net::SocketAddr::from((ip, port)).to_string())
    }

    /// Applies the manifest `yaml`.
    pub fn apply(&self, yaml: &str) -> anyhow::Result<()> {
        self.kubectl_with_stdin(&["apply", "-f", "-"], yaml)
            .map(drop)
            .context("kubectl apply")
    }

    /// Runs kubectl with `stdin` as its input: its stdout, or an error with its stderr (an
    /// admission refusal's message).
    pub fn kubectl_with_stdin(&self, args: &[&str], stdin: &str) -> anyhow::Result<String> {
        let mut child = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(stdin.as_bytes())?;
        let out = child.wait_with_output()?;
        ensure!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs crictl against the node's containerd.
    pub fn crictl(&self, args: &[&str]) -> anyhow::Result<String> {
        run(Command::new(&self.crictl)
            .arg("--runtime-endpoint")
            .arg(&self.endpoint)
            .args(args)
            .stderr(Stdio::null()))
    }

    /// Pod `name`'s phase; empty when it cannot be read.
    pub fn pod_phase(&self, name: &str) -> String {
        self.kubectl(&["get", "pod", name, "-o", "jsonpath={.status.phase}"])
            .unwrap_or_default()
    }

    /// Waits until pod `name` is in `phase`, up to [`WAIT`].
    pub fn wait_phase(&self, name: &str, phase: &str) -> anyhow::Result<()> {
        let start = Instant::now();
        while self.pod_phase(name) != phase {
            if start.elapsed() > WAIT {
                let d = self.kubectl(&["describe", "pod", name]).unwrap_or_default();
                bail!(
                    "pod {name} not {phase} after {WAIT:?}:\n{d}\n{}",
                    self.dra_state()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Ok(())
    }

    /// What a scheduling or preparing failure needs explained: the node's slices and the
    /// claims (with their allocations), and what graft's pods logged last.
    pub fn dra_state(&self) -> String {
        let get = |args: &[&str]| {
            self.kubectl(args)
                .unwrap_or_else(|e| format!("kubectl {}: {e:#}\n", args.join(" ")))
        };
        format!(
            "--- resourceslices\n{}--- resourceclaims\n{}--- graft pods\n{}--- graft logs\n{}",
            get(&["get", "resourceslices", "-o", "yaml"]),
            get(&["get", "resourceclaims", "-A", "-o", "yaml"]),
            get(&["-n", "graft-system", "get", "pods", "-o", "wide"]),
            get(&[
                "-n",
                "graft-system",
                "logs",
                "-l",
                "app.kubernetes.io/name=graft",
                "--all-containers",
                "--prefix",
                "--tail",
                "60",
            ]),
        )
    }

    /// Waits until object `kind`/`name` is gone, up to [`WAIT`].
    pub fn wait_gone(&self, kind: &str, name: &str) -> anyhow::Result<()> {
        let start = Instant::now();
        while !self
            .kubectl(&["get", kind, name, "--ignore-not-found", "-o", "name"])?
            .trim()
            .is_empty()
        {
            ensure!(
                start.elapsed() < WAIT,
                "{kind} {name} still there after {WAIT:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        Ok(())
    }

    /// Whether a container named `container` of `pod` is running now.
    pub fn running(&self, pod: &str, container: &str) -> anyhow::Result<bool> {
        let label = format!("io.kubernetes.pod.name={pod}");
        let ids = self.crictl(&["ps", "-q", "--name", container, "--label", &label])?;
        Ok(!ids.trim().is_empty())
    }

    /// The id of the newest container named `container` in `pod`, in any state.
    pub fn container_id(&self, pod: &str, container: &str) -> anyhow::Result<String> {
        let label = format!("io.kubernetes.pod.name={pod}");
        let out = self.crictl(&[
            "ps", "-a", "-o", "json", "--name", container, "--label", &label,
        ])?;
        let v: Value = serde_json::from_str(&out)?;
        let newest = v["containers"]
            .as_array()
            .and_then(|cs| {
                cs.iter().max_by_key(|c| {
                    c["createdAt"]
                        .as_str()
                        .and_then(|t| t.parse::<u128>().ok())
                        .unwrap_or(0)
                })
            })
            .with_context(|| format!("no container {container} in pod {pod}"))?;
        newest["id"]
            .as_str()
            .map(str::to_string)
            .context("container without id")
    }

    /// The OCI spec containerd stored for a pod's (newest) container, after NRI.
    pub fn runtime_spec(&self, pod: &str, container: &str) -> anyhow::Result<Value> {
        let id = self.container_id(pod, container)?;
        let v: Value = serde_json::from_str(&self.crictl(&["inspect", &id])?)?;
        Ok(v["info"]["runtimeSpec"].clone())
    }

    /// Keeps every containerised process named `name` on the node dead until the guard is
    /// dropped, the way a crash-looping container would be: the kubelet restarts it, it dies
    /// again. Only processes in a pod are killed: the suite's other tests run their own
    /// graft-nri on the host at the same time.
    pub fn hold_down(&self, name: &str) -> HoldDown {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let name = name.to_string();
        let thread = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                kill_contained(&name);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        // Give the kubelet a moment to notice, so that the first refusal comes from the
        // process being gone, not from a request racing its death.
        std::thread::sleep(Duration::from_secs(2));
        HoldDown {
            stop,
            thread: Some(thread),
        }
    }
}

/// Polls `done` until it holds or [`WAIT`] passes; returns how long it took.
pub fn wait_until(
    what: &str,
    mut done: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    while !done()? {
        ensure!(start.elapsed() < WAIT, "{what} after {WAIT:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    Ok(start.elapsed())
}

/// SIGKILLs each process named `name` that runs in a pod: its cgroup is below the kubelet's
/// `kubepods` (cgroupfs, on every testbed node). Its root says nothing: seen from the host, a
/// container's root reads as `/` too.
fn kill_contained(name: &str) {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let dir = p.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let cgroup = std::fs::read_to_string(dir.join("cgroup")).unwrap_or_default();
        if cgroup.contains("kubepods") {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

/// See [`Cluster::hold_down`].
pub struct HoldDown {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for HoldDown {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Tears the cluster down unless GRAFT_KEEP_CLUSTER is set.
impl Drop for Cluster {
    fn drop(&mut self) {
        if std::env::var_os("GRAFT_KEEP_CLUSTER").is_none() {
            let _ = run(script(&self.scripts, "cluster.sh", self.k8s).arg("down"));
        }
    }
}
