//! graft-nri as a child process, as the DaemonSet runs it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::bail;
use graft_record::{nri_readiness, read_boot_id, NriReadiness, NriStatus, BOOT_ID_PATH};
use nix::sys::signal::Signal;

use crate::containerd::signal;
use crate::testbed::workspace_bin;

/// A graft-nri process; stopped on drop.
pub struct GraftNri {
    /// The state directory it shares with the driver.
    pub state_dir: PathBuf,
    /// Its log.
    pub log: PathBuf,
    socket: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
}

impl GraftNri {
    /// Starts graft-nri against `socket`, sharing `state_dir` with the (test) driver.
    pub fn start(
        socket: &Path,
        state_dir: &Path,
        log: &Path,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let mut n = GraftNri {
            state_dir: state_dir.to_path_buf(),
            log: log.to_path_buf(),
            socket: socket.to_path_buf(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        n.spawn()?;
        Ok(n)
    }

    /// Starts the process.
    pub fn spawn(&mut self) -> anyhow::Result<()> {
        let child = Command::new(workspace_bin("graft-nri")?)
            .arg("--socket")
            .arg(&self.socket)
            .arg("--state-dir")
            .arg(&self.state_dir)
            .arg("--log-file")
            .arg(&self.log)
            // Its own socket, and a TCP port nothing else asks for.
            .arg("--health-socket")
            .arg(self.health_socket())
            .arg("--metrics-addr")
            .arg("127.0.0.1:0")
            .args(&self.extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        Ok(())
    }

    /// Its metrics and probe socket (next to its log).
    pub fn health_socket(&self) -> PathBuf {
        self.log.with_extension("sock")
    }

    /// Its metrics, read through the health socket.
    pub fn metrics(&self) -> anyhow::Result<String> {
        crate::scrape::metrics(&self.health_socket())
    }

    /// Its process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Stops it with SIGTERM, as a DaemonSet rollout would.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            signal(&child, Signal::SIGTERM);
            let start = Instant::now();
            while child.try_wait()?.is_none() {
                if start.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                    child.wait()?;
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// Kills it with SIGKILL (no clean stop: the status file still says connected) and
    /// reaps it.
    pub fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            signal(&child, Signal::SIGKILL);
            child.wait()?;
        }
        Ok(())
    }

    /// Waits until the status file says connected and synchronized, and the process holds
    /// the liveness lock.
    pub fn wait_synchronized(&mut self, limit: Duration) -> anyhow::Result<NriStatus> {
        // A test may hand graft-nri a boot id file of its own.
        let boot_path = self
            .extra
            .iter()
            .position(|a| a == "--boot-id-path")
            .and_then(|i| self.extra.get(i + 1))
            .map_or_else(|| PathBuf::from(BOOT_ID_PATH), PathBuf::from);
        let boot = read_boot_id(&boot_path)?;
        let start = Instant::now();
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(st) = child.try_wait()? {
                    bail!("graft-nri exited with {st}:\n{}", self.log_text());
                }
            }
            match nri_readiness(&self.state_dir, &boot)? {
                NriReadiness::Ready(s) => return Ok(s),
                NriReadiness::NotReady(why) if start.elapsed() > limit => {
                    bail!(
                        "graft-nri not ready after {limit:?}: {why}\n{}",
                        self.log_text()
                    )
                }
                NriReadiness::NotReady(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log contains `needle` and gives the log (see [`crate::logs::wait_for`]).
    pub fn wait_log(&self, needle: &str, limit: Duration) -> anyhow::Result<String> {
        crate::logs::wait_for(&self.log, "graft-nri", needle, limit)
    }
}

impl Drop for GraftNri {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
