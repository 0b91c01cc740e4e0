//! graft-driver as a child process, with the kubelet's view of it: the registration socket
//! and the DRA service, spoken to over gRPC exactly as the kubelet does.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::bail;
use graft_proto::dra::{v1, v1beta1};
use graft_proto::pluginregistration::registration_client::RegistrationClient;
use nix::sys::signal::Signal;
use tonic::transport::Channel;

use crate::containerd::signal;
use crate::testbed::workspace_bin;
use crate::unix::unix_channel;

/// How graft-driver is run.
#[derive(Debug, Clone)]
pub struct DriverOpts {
    /// `--driver-name`.
    pub driver_name: String,
    /// `--node-name`.
    pub node_name: String,
    /// The kubelet's directory (plugin sockets).
    pub kubelet_dir: PathBuf,
    /// `--state-dir`.
    pub state_dir: PathBuf,
    /// The device config (the char and files backends).
    pub device_config: PathBuf,
    /// The file it reads the boot id from.
    pub boot_id_path: PathBuf,
    /// The control plane's kubeconfig.
    pub kubeconfig: PathBuf,
    /// `--pod-uid`: per-instance socket names.
    pub pod_uid: Option<String>,
    /// Its log.
    pub log: PathBuf,
    /// More arguments, last.
    pub extra: Vec<String>,
    /// Another graft-driver binary than the workspace's (a bench's earlier build).
    pub binary: Option<PathBuf>,
}

/// A graft-driver process; killed on drop.
pub struct GraftDriver {
    /// How it runs.
    pub opts: DriverOpts,
    child: Option<Child>,
}

impl GraftDriver {
    /// Starts graft-driver with `opts`.
    pub fn start(opts: DriverOpts) -> anyhow::Result<Self> {
        let mut d = GraftDriver { opts, child: None };
        d.spawn(None)?;
        Ok(d)
    }

    /// Starts the process; `crash_at` makes it SIGKILL itself at that prepare step.
    pub fn spawn(&mut self, crash_at: Option<&str>) -> anyhow::Result<()> {
        let o = &self.opts;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&o.log)?;
        let bin = match &o.binary {
            Some(b) => b.clone(),
            None => workspace_bin("graft-driver")?,
        };
        let mut cmd = Command::new(bin);
        cmd.arg("--driver-name")
            .arg(&o.driver_name)
            .arg("--node-name")
            .arg(&o.node_name)
            .arg("--kubelet-dir")
            .arg(&o.kubelet_dir)
            .arg("--state-dir")
            .arg(&o.state_dir)
            .arg("--device-config")
            .arg(&o.device_config)
            .arg("--boot-id-path")
            .arg(&o.boot_id_path)
            // Its own socket, and a TCP port nothing else asks for.
            .arg("--health-socket")
            .arg(self.health_socket())
            .arg("--metrics-addr")
            .arg("127.0.0.1:0")
            .args(&o.extra)
            .env("KUBECONFIG", &o.kubeconfig)
            .env("RUST_LOG", "info,kube=warn,tower=warn,hyper=warn")
            .env_remove("POD_UID")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some(uid) = &o.pod_uid {
            cmd.arg("--pod-uid").arg(uid);
        }
        if let Some(p) = crash_at {
            cmd.arg("--crash-at").arg(p);
        }
        self.child = Some(cmd.spawn()?);
        Ok(())
    }

    /// Its metrics and probe socket (next to its log).
    pub fn health_socket(&self) -> PathBuf {
        self.opts.log.with_extension("sock")
    }

    /// Its metrics, read through the health socket.
    pub fn metrics(&self) -> anyhow::Result<String> {
        crate::scrape::metrics(&self.health_socket())
    }

    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// kill -9.
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            c.wait()?;
        }
        Ok(())
    }

    /// SIGTERM, as the kubelet stops a DaemonSet pod; returns the exit status.
    pub fn terminate(&mut self) -> anyhow::Result<ExitStatus> {
        let Some(c) = self.child.as_ref() else {
            bail!("graft-driver is not running");
        };
        signal(c, Signal::SIGTERM);
        self.wait_exit(Duration::from_secs(10))
    }

    /// Waits for the process to end by itself (a crash point, a signal sent earlier).
    pub fn wait_exit(&mut self, limit: Duration) -> anyhow::Result<ExitStatus> {
        let Some(mut c) = self.child.take() else {
            bail!("graft-driver is not running");
        };
        let start = Instant::now();
        loop {
            if let Some(st) = c.try_wait()? {
                return Ok(st);
            }
            if start.elapsed() > limit {
                let _ = c.kill();
                c.wait()?;
                bail!(
                    "graft-driver did not exit within {limit:?}:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.opts.log).unwrap_or_default()
    }

    /// Waits until the log contains `needle` and gives the log (see [`crate::logs::wait_for`]).
    pub fn wait_log(&self, needle: &str, limit: Duration) -> anyhow::Result<String> {
        crate::logs::wait_for(&self.opts.log, "graft-driver", needle, limit)
    }

    /// The kubelet's plugin registry.
    pub fn registry_dir(&self) -> PathBuf {
        self.opts.kubelet_dir.join("plugins_registry")
    }

    /// The driver's plugin directory.
    pub fn plugin_dir(&self) -> PathBuf {
        self.opts
            .kubelet_dir
            .join("plugins")
            .join(&self.opts.driver_name)
    }

    /// The registration sockets present, as the kubelet's plugin watcher would find them.
    pub fn registration_sockets(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(self.registry_dir())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket())
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| !n.starts_with('.'))
            })
            .collect();
        v.sort();
        v
    }

    /// Waits until a registration socket answers GetInfo; returns its path and the DRA
    /// endpoint it names.
    pub async fn wait_registered(&mut self, limit: Duration) -> anyhow::Result<(PathBuf, PathBuf)> {
        let start = Instant::now();
        loop {
            if let Some(c) = self.child.as_mut() {
                if let Some(st) = c.try_wait()? {
                    bail!("graft-driver exited with {st}:\n{}", self.log_text());
                }
            }
            for sock in self.registration_sockets() {
                if let Ok(mut reg) = self.registration(&sock).await {
                    if let Ok(info) = reg
                        .get_info(graft_proto::pluginregistration::InfoRequest {})
                        .await
                    {
                        return Ok((sock, PathBuf::from(info.into_inner().endpoint)));
                    }
                }
            }
            if start.elapsed() > limit {
                bail!(
                    "graft-driver not registered after {limit:?}:\n{}",
                    self.log_text()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A client of the registration socket `socket`.
    pub async fn registration(&self, socket: &Path) -> anyhow::Result<RegistrationClient<Channel>> {
        Ok(RegistrationClient::new(unix_channel(socket).await?))
    }

    /// A client of the DRA service (v1) at `endpoint`.
    pub async fn dra(
        &self,
        endpoint: &Path,
    ) -> anyhow::Result<v1::dra_plugin_client::DraPluginClient<Channel>> {
        Ok(v1::dra_plugin_client::DraPluginClient::new(
            unix_channel(endpoint).await?,
        ))
    }

    /// The first list of the health stream at `endpoint`, through v1 and v1alpha1 of the
    /// service, as (device, health, message) each.
    pub async fn health_lists(
        &self,
        endpoint: &Path,
    ) -> anyhow::Result<[Vec<(String, i32, String)>; 2]> {
        use graft_proto::dra_health::{v1 as h1, v1alpha1 as h0};
        let mut c1 = h1::dra_resource_health_client::DraResourceHealthClient::new(
            unix_channel(endpoint).await?,
        );
        let mut s1 = c1
            .node_watch_resources(h1::NodeWatchResourcesRequest {})
            .await?
            .into_inner();
        let m1 = s1.message().await?.unwrap_or_default();
        let mut c0 = h0::dra_resource_health_client::DraResourceHealthClient::new(
            unix_channel(endpoint).await?,
        );
        let mut s0 = c0
            .node_watch_resources(h0::NodeWatchResourcesRequest {})
            .await?
            .into_inner();
        let m0 = s0.message().await?.unwrap_or_default();
        let name = |d: Option<String>| d.unwrap_or_default();
        Ok([
            m1.devices
                .into_iter()
                .map(|d| (name(d.device.map(|i| i.device_name)), d.health, d.message))
                .collect(),
            m0.devices
                .into_iter()
                .map(|d| (name(d.device.map(|i| i.device_name)), d.health, d.message))
                .collect(),
        ])
    }

    /// A client of the DRA service (v1beta1) at `endpoint`.
    pub async fn dra_v1beta1(
        &self,
        endpoint: &Path,
    ) -> anyhow::Result<v1beta1::dra_plugin_client::DraPluginClient<Channel>> {
        Ok(v1beta1::dra_plugin_client::DraPluginClient::new(
            unix_channel(endpoint).await?,
        ))
    }
}

impl Drop for GraftDriver {
    fn drop(&mut self) {
        let _ = self.kill9();
    }
}
