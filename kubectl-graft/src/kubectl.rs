//! Running kubectl: the one way kubectl graft reaches the cluster, behind a trait so that the
//! tests can record what would run.

use std::ffi::OsString;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

/// kubectl, as kubectl graft uses it.
pub trait Kubectl {
    /// Runs kubectl with `args` and returns its stdout; a non-zero exit is an error carrying
    /// kubectl's stderr.
    fn capture(&mut self, args: &[String]) -> anyhow::Result<String>;
    /// Runs kubectl with `args` on this terminal's stdout and stderr; its exit code (kubectl
    /// exec exits with the remote command's code).
    fn run(&mut self, args: &[String]) -> anyhow::Result<i32>;
}

/// The kubectl on PATH, or the one `KUBECTL` names.
pub struct Real {
    bin: OsString,
}

impl Real {
    /// `KUBECTL`, else `kubectl`.
    pub fn from_env() -> Self {
        Real {
            bin: std::env::var_os("KUBECTL").unwrap_or_else(|| "kubectl".into()),
        }
    }

    fn command(&self, args: &[String]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(args).stdin(Stdio::null());
        c
    }

    fn started(&self, e: std::io::Error) -> anyhow::Error {
        let bin = self.bin.to_string_lossy();
        if e.kind() == std::io::ErrorKind::NotFound {
            anyhow::anyhow!("{bin} not found: kubectl graft runs kubectl (on PATH, or KUBECTL)")
        } else {
            anyhow::Error::new(e).context(format!("running {bin}"))
        }
    }
}

impl Kubectl for Real {
    fn capture(&mut self, args: &[String]) -> anyhow::Result<String> {
        let out = self.command(args).output().map_err(|e| self.started(e))?;
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        String::from_utf8(out.stdout).context("kubectl's output is not UTF-8")
    }

    fn run(&mut self, args: &[String]) -> anyhow::Result<i32> {
        let status = self
            .command(args)
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            .status()
            .map_err(|e| self.started(e))?;
        // Killed by a signal: no code; fail as a shell would report it.
        Ok(status.code().unwrap_or(1))
    }
}
