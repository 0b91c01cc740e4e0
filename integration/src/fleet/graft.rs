//! graft's cluster components against the fleet, as processes the way a cluster runs
//! them (each as an admin here: the fleet measures cost, not permissions), each with its
//! metrics on a loopback port.

use std::process::Command;
use std::time::{Duration, Instant};

use super::{ExtenderUse, Fleet, Proc};

/// graft-scheduler-extender running against the fleet.
pub struct Extender {
    /// The process.
    pub proc: Proc,
    /// How kube-scheduler calls it.
    pub usage: ExtenderUse,
    /// Where its /metrics and /readyz are (`127.0.0.1:<port>`).
    pub metrics: String,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A graft binary: from GRAFT_FLEET_BINS when set (release builds measured from a
/// harness built otherwise), else the workspace's.
fn bin(name: &str) -> anyhow::Result<std::path::PathBuf> {
    match std::env::var_os("GRAFT_FLEET_BINS") {
        Some(dir) => Ok(std::path::Path::new(&dir).join(name)),
        None => crate::testbed::workspace_bin(name),
    }
}

impl Fleet {
    /// Starts graft-scheduler-extender (plain HTTP on a loopback port) as an admin of the
    /// fleet, and waits until its caches are filled (`/readyz`).
    pub fn extender(&self, extra: &[&str]) -> anyhow::Result<Extender> {
        let (port, mport) = (free_port()?, free_port()?);
        let metrics = format!("127.0.0.1:{mport}");
        let proc = Proc::start(
            "graft-scheduler-extender",
            Command::new(bin("graft-scheduler-extender")?)
                .env("KUBECONFIG", &self.cp.kubeconfig)
                .arg(format!("--listen=127.0.0.1:{port}"))
                .arg(format!("--metrics-addr={metrics}"))
                .args(extra),
            &self.dir,
        )?;
        let start = Instant::now();
        while !matches!(crate::scrape::tcp_get(&metrics, "/readyz"), Ok((200, _))) {
            anyhow::ensure!(
                start.elapsed() < Duration::from_secs(120),
                "graft-scheduler-extender not ready after 120 s (log: {})",
                self.dir.join("graft-scheduler-extender.log").display()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        Ok(Extender {
            proc,
            usage: ExtenderUse {
                url: format!("http://127.0.0.1:{port}/"),
            },
            metrics,
        })
    }
}

/// graft's namespace in the fleet: the controller's daemons go there.
pub const NAMESPACE: &str = "graft-system";

/// The ComputeDomain controller against the fleet.
pub struct Controller {
    /// The process.
    pub proc: Proc,
    /// Where its /metrics are.
    pub metrics: String,
}

impl Fleet {
    /// Installs the chart's ComputeDomain CRD and graft's namespace, and starts the
    /// ComputeDomain controller (its IMEX daemons are pods the fake kubelet runs).
    pub fn cd_controller(&self, tb: &crate::testbed::Testbed) -> anyhow::Result<Controller> {
        let crd = tb.render_chart(&[
            "--set",
            "computeDomains.enabled=true",
            "--show-only",
            "templates/70-compute-domain-crd.yaml",
        ])?;
        let path = self.dir.join("crd.yaml");
        std::fs::write(&path, crd)?;
        self.cp.kubectl(&["apply", "-f", &path.to_string_lossy()])?;
        let _ = self.cp.kubectl(&["create", "namespace", NAMESPACE]);
        let start = Instant::now();
        while self
            .cp
            .kubectl(&["get", "crd", "computedomains.resource.graft.dev"])
            .is_err()
        {
            anyhow::ensure!(
                start.elapsed() < Duration::from_secs(60),
                "the CRD is not served"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        self.controller_process(
            "graft-compute-domain-controller",
            &bin("graft-compute-domain-controller")?,
            "graft-compute-domain-controller",
        )
    }

    /// One more controller process from `binary`, holding Lease `lease` (so that it leads,
    /// and fills its caches, beside another): an earlier build, side by side.
    pub fn controller_process(
        &self,
        name: &str,
        binary: &std::path::Path,
        lease: &str,
    ) -> anyhow::Result<Controller> {
        let metrics = format!("127.0.0.1:{}", free_port()?);
        let proc = Proc::start(
            name,
            Command::new(binary)
                .env("KUBECONFIG", &self.cp.kubeconfig)
                .args([
                    "--namespace",
                    NAMESPACE,
                    "--daemon-image",
                    "registry.invalid/imex:1",
                    "--lease",
                    lease,
                ])
                .arg(format!("--metrics-addr={metrics}")),
            &self.dir,
        )?;
        Ok(Controller { proc, metrics })
    }
}
