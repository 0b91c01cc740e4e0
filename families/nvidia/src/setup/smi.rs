//! nvidia-smi, for what NVML has no call for (the compute time slice) and for turning
//! persistence mode off through nvidia-persistenced.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use crate::setup_error::NvidiaSetupError;
use graft_driver_core::claims::setup_port::SetupError;

/// Runs nvidia-smi with arguments.
pub trait Smi: Send + Sync {
    /// Runs it; a failed exit is an error carrying its stderr.
    fn run(&self, args: &[String]) -> Result<(), SetupError>;
}

/// The driver root's nvidia-smi, run chrooted into the driver root (as this process sees
/// it) so that it finds its own libraries, whatever this image holds.
pub struct ChrootSmi {
    /// The driver root, as this process sees it.
    pub root: PathBuf,
    /// Inside the driver root; discovery keeps it at the nvidia-smi it chose.
    pub path: std::sync::Arc<std::sync::RwLock<String>>,
}

impl Smi for ChrootSmi {
    fn run(&self, args: &[String]) -> Result<(), SetupError> {
        let root = self.root.clone();
        let path = self
            .path
            .read()
            .map(|p| p.clone())
            .unwrap_or_else(|p| p.into_inner().clone());
        let mut cmd = Command::new(&path);
        cmd.args(args);
        // SAFETY: chroot and chdir are async-signal-safe; nothing else runs between fork
        // and exec.
        unsafe {
            cmd.pre_exec(move || {
                std::os::unix::fs::chroot(&root)?;
                std::env::set_current_dir("/")
            });
        }
        let out = cmd.output().map_err(|source| SetupError::Io {
            op: format!("running {} {}", path, args.join(" ")),
            path: self.root.clone(),
            source,
        })?;
        if !out.status.success() {
            return Err(NvidiaSetupError::Tool {
                tool: path,
                args: args.join(" "),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            }
            .into());
        }
        Ok(())
    }
}
