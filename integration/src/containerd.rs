//! A real containerd on private paths: own root, state, sockets and NRI socket, so that it
//! coexists with anything else on the machine.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use oci_spec::runtime::Spec;

mod config;

use crate::testbed::Testbed;

/// Which containerd the testbed runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// containerd 2.2.x, built from the Go module proxy.
    V2_2,
    /// containerd 2.4.x, built from the Go module proxy: the cluster's runtime.
    V2_4,
    /// containerd 1.7.24 from Debian trixie.
    V1_7,
}

impl Version {
    /// How test names and logs call it.
    pub fn label(self) -> &'static str {
        match self {
            Version::V2_2 => "containerd-2.2",
            Version::V2_4 => "containerd-2.4",
            Version::V1_7 => "containerd-1.7",
        }
    }
}

/// The pause image the sandbox uses; imported under exactly this name from [`PAUSE_TAR`].
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10.2";
/// The image tar `integration/testbed/build-images.sh` writes for [`PAUSE_IMAGE`].
pub const PAUSE_TAR: &str = "pause-3.10.2.tar";
/// Bounds each crictl call: a wedged runtime fails the call instead of hanging the test.
/// Generous, since removing a pod stops its containers first.
const CRICTL_TIMEOUT: &str = "30s";
/// How often teardown tries to remove what is left before it reports it.
const TEARDOWN_TRIES: u32 = 3;

/// The busybox test image.
pub const BUSYBOX_IMAGE: &str = "docker.io/library/busybox:test";

/// A containerd of the testbed, running under its own directory; stopped on drop.
pub struct Containerd {
    /// Which one.
    pub version: Version,
    /// Its directory: config, state, logs.
    pub dir: PathBuf,
    /// Its CRI socket.
    pub socket: PathBuf,
    /// Its NRI socket.
    pub nri_socket: PathBuf,
    bin_dir: PathBuf,
    runc_dir: PathBuf,
    crictl: PathBuf,
    child: Option<Child>,
    /// Runs in a mount namespace of its own ([`Containerd::isolate`]).
    own_mounts: bool,
}

impl Containerd {
    /// Writes the config and starts containerd under `dir`, then imports the test images.
    pub fn start(tb: &Testbed, version: Version, dir: &Path) -> anyhow::Result<Self> {
        Self::start_with_runc(tb, version, dir, &tb.runc_dir)
    }

    /// [`Containerd::start`] with the runc found in `runc_dir`.
    pub fn start_with_runc(
        tb: &Testbed,
        version: Version,
        dir: &Path,
        runc_dir: &Path,
    ) -> anyhow::Result<Self> {
        let bin_dir = match version {
            Version::V2_2 => tb.containerd_2.clone(),
            Version::V2_4 => tb.containerd_24.clone(),
            Version::V1_7 => tb.containerd_17.clone(),
        };
        // Short paths: unix socket paths are limited to 108 bytes.
        fs::create_dir_all(dir)?;
        for d in [
            "root",
            "state",
            "cni/bin",
            "cni/net.d",
            "nri/plugins",
            "nri/conf.d",
            "logs",
        ] {
            fs::create_dir_all(dir.join(d))?;
        }
        fs::write(
            dir.join("cni/net.d/10-placeholder.conflist"),
            r#"{"cniVersion":"1.0.0","name":"graft-placeholder","plugins":[{"type":"loopback"}]}"#,
        )?;
        let mut c = Containerd {
            version,
            socket: dir.join("containerd.sock"),
            nri_socket: dir.join("nri.sock"),
            dir: dir.to_path_buf(),
            bin_dir,
            runc_dir: runc_dir.to_path_buf(),
            crictl: tb.crictl.clone(),
            child: None,
            own_mounts: false,
        };
        fs::write(dir.join("config.toml"), config::toml(version, dir, None))?;
        c.spawn()?;
        for image in [PAUSE_TAR, "busybox.tar"] {
            c.ctr(&["images", "import", &tb.images.join(image).to_string_lossy()])?;
        }
        Ok(c)
    }

    fn path_env(&self) -> String {
        format!(
            "{}:{}:{}",
            self.bin_dir.display(),
            self.runc_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    /// Restarts containerd in a mount namespace of its own, with private propagation: its
    /// sandboxes' mounts stay out of the host's mount table and of other instances', so one
    /// instance's work does not grow another's (containerd parses its mount table on every
    /// container). For benches that run instances side by side.
    pub fn isolate(&mut self) -> anyhow::Result<()> {
        self.own_mounts = true;
        self.restart()
    }

    /// Restarts containerd (2.x) reading CDI specs from `spec_dir` alone, as NVIDIA's CDI
    /// path runs it: a container's CDI devices come from those specs.
    pub fn enable_cdi(&mut self, spec_dir: &Path) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.version != Version::V1_7,
            "CDI is set up for containerd 2.x only"
        );
        let toml = config::toml(self.version, &self.dir, Some(spec_dir));
        fs::write(self.dir.join("config.toml"), toml)?;
        self.restart()
    }

    /// containerd's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The containerd binary.
    pub fn binary(&self) -> PathBuf {
        self.bin_dir.join("containerd")
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let _ = fs::remove_file(&self.socket);
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("logs/containerd.log"))?;
        // unshare(1) execs containerd, so the child's pid stays containerd's.
        let mut cmd = if self.own_mounts {
            let mut c = Command::new("unshare");
            c.args(["--mount", "--propagation", "private"])
                .arg(self.binary());
            c
        } else {
            Command::new(self.binary())
        };
        let child = cmd
            .arg("--config")
            .arg(self.dir.join("config.toml"))
            .env("PATH", self.path_env())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.bin_dir.join("containerd").display()))?;
        self.child = Some(child);
        self.wait_ready(Duration::from_secs(60))
    }

    /// Waits until CRI answers and the NRI socket exists.
    fn wait_ready(&mut self, limit: Duration) -> anyhow::Result<()> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    bail!(
                        "containerd exited with {status}; see {}",
                        self.log_path().display()
                    );
                }
            }
            if self.socket.exists() && self.nri_socket.exists() {
                let ok = Command::new(self.bin_dir.join("ctr"))
                    .args(["-a"])
                    .arg(&self.socket)
                    .arg("version")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .map(|s| s.success())
                    .unwrap_or(false);
                if ok {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!(
            "containerd not ready after {limit:?}; see {}",
            self.log_path().display()
        )
    }

    /// Imports an OCI image-layout tar into the CRI namespace.
    pub fn import_image(&self, tar: &Path) -> anyhow::Result<()> {
        self.ctr(&["images", "import", &tar.to_string_lossy()])?;
        Ok(())
    }

    /// Its log.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("logs/containerd.log")
    }

    /// Runs `crictl` against this containerd, each call bounded by [`CRICTL_TIMEOUT`];
    /// returns stdout.
    pub fn crictl(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(&self.crictl)
            .arg("--runtime-endpoint")
            .arg(format!("unix://{}", self.socket.display()))
            .args(["--timeout", CRICTL_TIMEOUT])
            .args(args)
            .output()?;
        if !out.status.success() {
            bail!("crictl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `crictl inspect ID`'s `.info.runtimeSpec`: the stored OCI spec after NRI edits.
    pub fn runtime_spec(&self, container_id: &str) -> anyhow::Result<serde_json::Value> {
        let out = self.crictl(&["inspect", container_id])?;
        let v: serde_json::Value = serde_json::from_str(&out)?;
        Ok(v["info"]["runtimeSpec"].clone())
    }

    /// [`Containerd::runtime_spec`], typed.
    pub fn oci_spec(&self, container_id: &str) -> anyhow::Result<Spec> {
        serde_json::from_value(self.runtime_spec(container_id)?)
            .with_context(|| format!("the runtime spec of container {container_id}"))
    }

    /// Runs `ctr` against this containerd in the CRI namespace.
    pub fn ctr(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(self.bin_dir.join("ctr"))
            .arg("-a")
            .arg(&self.socket)
            .args(["-n", "k8s.io"])
            .args(args)
            .env("PATH", self.path_env())
            .output()?;
        if !out.status.success() {
            bail!("ctr {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Stops containerd (SIGTERM, then SIGKILL). Containers keep running in their shims.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            signal(&child, Signal::SIGTERM);
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(15) {
                if child.try_wait()?.is_some() {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            child.wait()?;
        }
        Ok(())
    }

    /// Stops it and starts it again on the same directory.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.stop()?;
        self.spawn()
    }

    /// Stops and removes every pod (and so every container) of this containerd, a few
    /// tries; the error names whatever is left.
    fn remove_all_pods(&self) -> anyhow::Result<()> {
        let mut left = String::new();
        for attempt in 1..=TEARDOWN_TRIES {
            let removed = self.crictl(&["rmp", "--all", "--force"]);
            // A container whose pod is gone would not be found through its pod.
            if let Ok(ids) = self.crictl(&["ps", "--all", "--quiet"]) {
                for id in ids.split_whitespace() {
                    let _ = self.crictl(&["rm", "--force", id]);
                }
            }
            let (pods, ctrs) = (
                self.crictl(&["pods", "--quiet"]),
                self.crictl(&["ps", "--all", "--quiet"]),
            );
            if let (Ok(p), Ok(c)) = (&pods, &ctrs) {
                if p.trim().is_empty() && c.trim().is_empty() {
                    return Ok(());
                }
            }
            let list = |r: anyhow::Result<String>| match r {
                Ok(ids) => ids.split_whitespace().collect::<Vec<_>>().join(" "),
                Err(e) => format!("unknown ({e:#})"),
            };
            left = format!("pods [{}], containers [{}]", list(pods), list(ctrs));
            if let Err(e) = removed {
                left.push_str(&format!("; rmp: {e:#}"));
            }
            if attempt < TEARDOWN_TRIES {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        bail!("after {TEARDOWN_TRIES} tries, left: {left}")
    }

    /// Stops every pod this containerd runs, then containerd itself.
    pub fn teardown(&mut self) {
        if self.child.is_some() {
            if let Err(e) = self.remove_all_pods() {
                eprintln!(
                    "teardown of containerd at {}: pods not all removed: {e:#}",
                    self.dir.display()
                );
            }
        }
        let _ = self.stop();
        // Shims outlive containerd; end the ones of this instance so nothing leaks.
        let _ = Command::new("pkill")
            .args([
                "-f",
                &format!(
                    "containerd-shim-runc-v2 .*-address {}",
                    self.socket.display()
                ),
            ])
            .status();
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Sends `sig` to a child we spawned and have not reaped (so its pid is still ours).
pub(crate) fn signal(child: &Child, sig: Signal) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = kill(Pid::from_raw(pid), sig);
    }
}
