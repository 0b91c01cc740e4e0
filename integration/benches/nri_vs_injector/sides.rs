//! The bench's four sides: one containerd each, and the plugin beside it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use graft_integration::bench::sched::run_queue_wait;
use graft_integration::cri::Pod;
use graft_integration::testbed::workspace_bin;
use graft_integration::{Containerd, Cri};

pub const DEVICE: &str = "/dev/graft-bench0";
/// The same node for both plugins: char 1:3, mode 0666.
pub const INJECTOR_ANNOTATION: (&str, &str) = (
    "devices.noderesource.dev/pod",
    "- {path: /dev/graft-bench0, type: c, major: 1, minor: 3, file_mode: 438}",
);

/// A plugin process (device-injector or graft-null-nri), stopped on drop.
pub struct Plugin {
    pub child: Child,
    log: PathBuf,
}

impl Plugin {
    /// containerd's device-injector, built by integration/testbed/build-nri-plugins.sh.
    pub fn injector(nri_socket: &Path, log: &Path) -> anyhow::Result<Self> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("testbed/build-nri-plugins.sh");
        let out = Command::new("bash")
            .arg(&script)
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("running {}", script.display()))?;
        if !out.status.success() {
            bail!("{} failed", script.display());
        }
        let bin = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .map(PathBuf::from)
            .context("build-nri-plugins.sh printed no path")?;
        Self::spawn(&bin, &["-idx", "10", "-socket-path"], nri_socket, log)
    }

    /// graft-null-nri: graft's SDK answering every CreateContainer with nothing, on the
    /// SDK's inline path or (`via_ttrpc`) through ttrpc's tasks.
    pub fn null(nri_socket: &Path, log: &Path, via_ttrpc: bool) -> anyhow::Result<Self> {
        let after: &[&str] = if via_ttrpc { &["--via-ttrpc"] } else { &[] };
        let bin = workspace_bin("graft-null-nri")?;
        Self::spawn_with(&bin, &[], nri_socket, after, log)
    }

    fn spawn(bin: &Path, args: &[&str], socket: &Path, log: &Path) -> anyhow::Result<Self> {
        Self::spawn_with(bin, args, socket, &[], log)
    }

    fn spawn_with(
        bin: &Path,
        args: &[&str],
        socket: &Path,
        after: &[&str],
        log: &Path,
    ) -> anyhow::Result<Self> {
        let file = File::create(log)?;
        let child = Command::new(bin)
            .args(args)
            .arg(socket)
            .args(after)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Plugin {
            child,
            log: log.to_path_buf(),
        })
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the stored runtime spec of `id` holds the bench's device node.
pub fn has_device(cd: &Containerd, id: &str) -> anyhow::Result<bool> {
    let spec = cd.runtime_spec(id)?;
    let devices = spec["linux"]["devices"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok(devices.iter().any(|d| d["path"] == DEVICE))
}

/// UID of the `n`th bench pod of a side.
pub fn pod_uid(label: &str, n: usize) -> String {
    format!("bench-pod-{label}-{n:03}")
}

/// One containerd and what it runs.
pub struct Side {
    pub label: &'static str,
    pub cd: Containerd,
    pub cri: Cri,
    pub pod: Option<Pod>,
    /// The plugin's process, when the side has one.
    pub plugin_pid: Option<u32>,
    /// Whether the plugin must inject [`DEVICE`].
    pub injects: bool,
}

/// What one CreateContainer took.
pub struct Call {
    pub id: String,
    pub took: Duration,
    /// Run-queue wait of containerd's and the plugin's threads during the call.
    pub waited: Duration,
}

impl Side {
    pub async fn new(
        label: &'static str,
        cd: Containerd,
        base: &Path,
        plugin_pid: Option<u32>,
        injects: bool,
    ) -> anyhow::Result<Self> {
        let cri = Cri::connect(&cd.socket, &base.join(label).join("pods")).await?;
        Ok(Side {
            label,
            cd,
            cri,
            pod: None,
            plugin_pid,
            injects,
        })
    }

    /// Removes the side's pod, if any, and starts its `n`th (not timed).
    pub async fn next_pod(&mut self, n: usize) -> anyhow::Result<()> {
        if let Some(old) = self.pod.take() {
            self.cri.remove_pod(&old).await?;
        }
        let pod = self
            .cri
            .run_pod_annotated("bench", &pod_uid(self.label, n), &[INJECTOR_ANNOTATION])
            .await?;
        self.pod = Some(pod);
        Ok(())
    }

    fn waited(&self) -> Duration {
        let cd = self.cd.pid().map(run_queue_wait).unwrap_or_default();
        cd + self.plugin_pid.map(run_queue_wait).unwrap_or_default()
    }

    /// Creates container `name` in the current pod, timed.
    pub async fn create(&self, name: &str) -> anyhow::Result<Call> {
        let pod = self.pod.as_ref().context("no pod")?;
        let w0 = self.waited();
        let t = std::time::Instant::now();
        let id = self.cri.create(pod, name, "exec sleep 3600").await?;
        let took = t.elapsed();
        let waited = self.waited().saturating_sub(w0);
        Ok(Call { id, took, waited })
    }
}
