//! The DRA test driver Kubernetes uses in its own end-to-end tests
//! (k8s.io/kubernetes/test/e2e/dra/test-driver: a kubelet plugin that injects through CDI),
//! built by integration/testbed/build-dra-test-driver.sh, as a process beside graft for the
//! side-by-side benchmarks.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::Context;

/// Its driver name.
pub const NAME: &str = "test-driver.cdi.k8s.io";

/// The test driver's `kubelet-plugin` command; stopped (SIGTERM, so that it removes its
/// sockets) when dropped.
pub struct TestDriver(Child);

impl TestDriver {
    /// Builds it if needed and starts `kubelet-plugin --node-name <node>` with `args` after,
    /// against the API server of `kubeconfig`, logging to `log`. It makes its plugins
    /// directory but not its own socket directory in it: the caller makes that.
    pub fn start<I, S>(kubeconfig: &Path, node: &str, args: I, log: &Path) -> anyhow::Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let bin = crate::testbed::build_tool("build-dra-test-driver.sh")?;
        let out = std::fs::File::create(log)?;
        let child = Command::new(&bin)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["kubelet-plugin", "--node-name", node])
            .args(args)
            .stdout(out.try_clone()?)
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Self(child))
    }
}

impl Drop for TestDriver {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.0.wait();
    }
}

/// Where the plugin's DRA socket is, given its `--datadir`.
pub fn socket(datadir: &Path) -> PathBuf {
    datadir.join(NAME).join("dra.sock")
}
