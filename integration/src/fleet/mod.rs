//! A fleet of simulated GPU nodes on one machine, against the testbed's real control
//! plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler (one process
//! per scheduler profile set), with N Node objects that no kubelet runs. Each node is
//! written Ready once and publishes the ResourceSlices graft-driver would publish on it
//! ([`shapes`]); pods bound to it are marked Running, and deleted pods removed, by
//! [`kubelet`], as kwok's fake kubelet does. graft's cluster components (the extender,
//! the ComputeDomain controller) run as processes against it, as they do in a cluster.
//!
//! What is not real, and why:
//! - No lease heartbeats: 5,000 nodes renewing a Lease every 10 s is 500 writes/s, which
//!   on two cores would measure the API server, not graft. The node lifecycle controller
//!   runs (it lifts the `not-ready` taint admission puts on new nodes) with a grace period
//!   of an hour, so that no node is marked unreachable during a run.
//! - No container ever starts; a pod is Running as soon as it is bound.

pub mod audit;
pub mod domains;
pub mod graft;
pub mod kubelet;
pub mod nodes;
pub mod shapes;
pub mod workload;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::Context;
use nix::sys::signal::Signal;

use crate::apiserver::ControlPlane;
use crate::testbed::Testbed;

/// A process of the fleet (a scheduler, a controller, a graft component), killed on drop.
pub struct Proc {
    /// What it is.
    pub name: String,
    child: Child,
}

impl Proc {
    /// Starts `cmd` with its output in `dir/<name>.log`; it dies with the thread that
    /// started it (PR_SET_PDEATHSIG), so start it from one that lives as long as the run.
    pub fn start(name: &str, cmd: &mut Command, dir: &Path) -> anyhow::Result<Self> {
        let out = std::fs::File::create(dir.join(format!("{name}.log")))?;
        let err = out.try_clone()?;
        // SAFETY: the closure runs in the forked child before exec and only calls
        // prctl(2), which is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
                Ok(())
            });
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        Ok(Proc {
            name: name.to_string(),
            child,
        })
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Resident memory now and its peak, KiB (VmRSS, VmHWM).
    pub fn rss_kib(&self) -> (u64, u64) {
        crate::bench::rss_kib(self.pid())
    }

    /// CPU time so far (user + system).
    pub fn cpu_time(&self) -> std::time::Duration {
        crate::bench::cpu_time(self.pid())
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A kube-scheduler's extender, as docs/placement.md configures it (plain HTTP here: the
/// fleet measures scoring, not TLS, and both sides of a comparison pay the same).
pub struct ExtenderUse {
    /// Its `urlPrefix`.
    pub url: String,
}

/// The control plane and its schedulers.
pub struct Fleet {
    /// etcd and kube-apiserver.
    pub cp: ControlPlane,
    /// Where logs and configurations go.
    pub dir: PathBuf,
    bins: PathBuf,
    /// kube-controller-manager and the schedulers.
    pub procs: Vec<Proc>,
    /// kube-apiserver's audit log ([`audit`]).
    pub audit_log: PathBuf,
}

impl Fleet {
    /// Starts etcd, kube-apiserver and kube-controller-manager of the newest Kubernetes
    /// under `dir`.
    pub fn start(tb: &Testbed, dir: &Path) -> anyhow::Result<Self> {
        // The audit files beside `dir`, which the control plane makes afresh.
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("fleet");
        let policy = dir.with_file_name(format!("{name}-audit-policy.yaml"));
        let audit_log = dir.with_file_name(format!("{name}-audit.log"));
        let _ = std::fs::remove_file(&audit_log);
        let extra = audit::args(&policy, &audit_log)?;
        let cp = ControlPlane::start_with(tb, dir, crate::cluster::Kubernetes::Newest, &extra)?;
        let mut f = Fleet {
            cp,
            dir: dir.to_path_buf(),
            bins: tb.k8s.clone(),
            procs: Vec::new(),
            audit_log,
        };
        let sa_key = dir.join("pki/sa.key");
        let cm = Proc::start(
            "kube-controller-manager",
            Command::new(f.bins.join("kube-controller-manager"))
                .arg(format!("--kubeconfig={}", f.cp.kubeconfig.display()))
                .args(["--leader-elect=false", "--controllers=*"])
                .arg(format!(
                    "--service-account-private-key-file={}",
                    sa_key.display()
                ))
                .args([
                    // Its port would meet a cluster's controller-manager on this machine.
                    "--secure-port=0",
                    "--use-service-account-credentials=false",
                    "--node-monitor-grace-period=1h",
                    "--kube-api-qps=500",
                    "--kube-api-burst=1000",
                ]),
            dir,
        )?;
        f.procs.push(cm);
        Ok(f)
    }

    /// Starts a kube-scheduler serving the profiles `profiles` (scheduler names), calling
    /// `extender` for every profile when given (extenders are per process, not per
    /// profile: a second profile with the extender is a second scheduler).
    pub fn scheduler(
        &mut self,
        name: &str,
        profiles: &[&str],
        extender: Option<&ExtenderUse>,
    ) -> anyhow::Result<()> {
        let mut yaml = format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             clientConnection: {{kubeconfig: {}, qps: 1000, burst: 2000}}\n\
             leaderElection: {{leaderElect: false}}\nprofiles:\n",
            self.cp.kubeconfig.display()
        );
        for p in profiles {
            yaml.push_str(&format!("  - schedulerName: {p}\n"));
        }
        if let Some(e) = extender {
            yaml.push_str(&format!(
                "extenders:\n  - urlPrefix: {}\n    prioritizeVerb: prioritize\n    weight: 5\n    \
                 nodeCacheCapable: true\n    ignorable: true\n    httpTimeout: 2s\n",
                e.url
            ));
        }
        let path = self.dir.join(format!("{name}.yaml"));
        std::fs::write(&path, yaml)?;
        let p = Proc::start(
            name,
            Command::new(self.bins.join("kube-scheduler"))
                .arg(format!("--config={}", path.display()))
                .args(["--secure-port=0"]),
            &self.dir,
        )?;
        self.procs.push(p);
        Ok(())
    }

    /// Every process still runs; the first that does not, named, with its log's tail.
    pub fn check(&mut self) -> anyhow::Result<()> {
        for p in &mut self.procs {
            if !p.running() {
                let log = std::fs::read_to_string(self.dir.join(format!("{}.log", p.name)))
                    .unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                anyhow::bail!(
                    "{} exited; its log, newest first:\n{}",
                    p.name,
                    tail.join("\n")
                );
            }
        }
        Ok(())
    }

    /// Waits until no simulated node is tainted ([`nodes::wait_untainted`]); when that
    /// fails, the process that is gone (the controller-manager lifts the taints) is named.
    pub async fn nodes_ready(
        &mut self,
        client: &kube::Client,
        limit: std::time::Duration,
    ) -> anyhow::Result<()> {
        let waited = nodes::wait_untainted(client, limit).await;
        if waited.is_err() {
            self.check()?;
        }
        waited
    }

    /// A client for the API server, as an admin.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        self.cp.client().await
    }
}

/// A runtime for a fleet run: its processes die with the thread that started them
/// ([`Proc::start`]), so start them inside `block_on` on the thread that keeps it.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

impl Fleet {
    /// A fleet under `dir` with the chart's DeviceClasses and the nodes of `plan` made and
    /// untainted (within `limit`); its admin client and the number of slices published.
    pub async fn with_nodes(
        tb: &Testbed,
        dir: &Path,
        shapes: &shapes::Shapes,
        plan: &[nodes::SimNode],
        limit: std::time::Duration,
    ) -> anyhow::Result<(Fleet, kube::Client, usize)> {
        let mut fleet = Fleet::start(tb, dir)?;
        fleet.device_classes(tb)?;
        let c = fleet.client().await?;
        let slices = nodes::make(&c, shapes, plan).await?;
        fleet.nodes_ready(&c, limit).await?;
        Ok((fleet, c, slices))
    }

    /// Applies the chart's DeviceClasses, as shipped.
    pub fn device_classes(&self, tb: &Testbed) -> anyhow::Result<()> {
        let yaml = tb.render_chart(&["--show-only", "templates/30-deviceclasses.yaml"])?;
        let path = self.dir.join("deviceclasses.yaml");
        std::fs::write(&path, yaml)?;
        self.cp
            .kubectl(&["apply", "-f", &path.to_string_lossy()])
            .map(|_| ())
    }
}
