//! VFIO passthrough through sysfs: NVIDIA PCI functions and their IOMMU groups, and moving
//! a function between drivers. The sysfs and procfs roots are parameters, so the logic runs
//! against a fake tree in tests.
//!
//! What graft writes, and so what must be writable where it runs (the chart's
//! `nvidia.passthrough`): `<sys>/bus/pci/drivers/<driver>/{bind,unbind}`,
//! `<sys>/bus/pci/devices/<bdf>/driver_override` (a link into `<sys>/devices/...`) and the
//! nvidia driver's `<proc>/driver/nvidia/gpus/<bdf>/unbindLock`.

pub mod group;
mod passthrough;
pub mod persistence;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::setup::SetupError;

/// An NVIDIA display-class PCI function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciFunction {
    /// sysfs form, `0000:18:00.0`.
    pub bdf: String,
    pub device_id: String,
    pub iommu_group: Option<u32>,
    pub driver: Option<String>,
    /// The other functions of its IOMMU group that passthrough takes with it (PCI bridges
    /// left out), sorted; empty when the group cannot be read.
    pub group_peers: Vec<String>,
}

pub struct Vfio {
    pub sys: PathBuf,
    pub proc: PathBuf,
    /// How long to wait for the GPU to be free (unbindLock) and for a bind to show.
    pub timeout: Duration,
}

const NVIDIA_VENDOR: &str = "0x10de";
/// The two drivers a GPU itself is moved between; its group peers go back to their own.
pub const NVIDIA_DRIVER: &str = "nvidia";
pub const VFIO_DRIVER: &str = "vfio-pci";

fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

fn basename_of_link(p: &Path) -> Option<String> {
    let target = std::fs::read_link(p).ok()?;
    Some(target.file_name()?.to_str()?.to_string())
}

impl Vfio {
    fn dev(&self, bdf: &str) -> PathBuf {
        self.sys.join("bus/pci/devices").join(bdf)
    }

    /// NVIDIA functions of display class (0x03xxxx), sorted by address.
    pub fn functions(&self) -> Vec<PciFunction> {
        let Ok(entries) = std::fs::read_dir(self.sys.join("bus/pci/devices")) else {
            return Vec::new();
        };
        let mut out: Vec<PciFunction> = entries
            .flatten()
            .filter_map(|e| {
                let bdf = e.file_name().into_string().ok()?;
                let dir = e.path();
                if read_trim(&dir.join("vendor"))? != NVIDIA_VENDOR {
                    return None;
                }
                if !read_trim(&dir.join("class"))?.starts_with("0x03") {
                    return None;
                }
                let iommu_group =
                    basename_of_link(&dir.join("iommu_group")).and_then(|g| g.parse().ok());
                let group_peers = match iommu_group {
                    Some(g) => self.group_members(g).unwrap_or_default(),
                    None => Vec::new(),
                }
                .into_iter()
                .filter(|m| *m != bdf && !self.is_bridge(m))
                .collect();
                Some(PciFunction {
                    device_id: read_trim(&dir.join("device")).unwrap_or_default(),
                    iommu_group,
                    driver: basename_of_link(&dir.join("driver")),
                    group_peers,
                    bdf,
                })
            })
            .collect();
        out.sort_by(|a, b| a.bdf.cmp(&b.bdf));
        out
    }

    pub fn driver(&self, bdf: &str) -> Option<String> {
        basename_of_link(&self.dev(bdf).join("driver"))
    }

    pub fn iommu_group(&self, bdf: &str) -> Option<u32> {
        basename_of_link(&self.dev(bdf).join("iommu_group")).and_then(|g| g.parse().ok())
    }

    fn write(&self, path: &Path, value: &str) -> Result<(), SetupError> {
        std::fs::write(path, value).map_err(|source| SetupError::Io {
            op: format!("writing {value:?} to"),
            path: path.to_path_buf(),
            source,
        })
    }

    /// Takes the nvidia driver's unbind lock, which it grants only while no process uses
    /// the GPU; retried until the timeout.
    fn unbind_lock(&self, bdf: &str) -> Result<(), SetupError> {
        let lock = self
            .proc
            .join("driver/nvidia/gpus")
            .join(bdf)
            .join("unbindLock");
        let start = Instant::now();
        loop {
            self.write(&lock, "1")?;
            if read_trim(&lock).as_deref() == Some("1") {
                return Ok(());
            }
            if start.elapsed() >= self.timeout {
                return Err(SetupError::Timeout {
                    what: format!(
                        "GPU {bdf} is still in use (the nvidia driver refuses its unbind lock)"
                    ),
                    after: self.timeout,
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until the function's driver is `want` (`None`: unbound).
    fn wait_driver(&self, bdf: &str, want: Option<&str>) -> Result<(), SetupError> {
        let start = Instant::now();
        loop {
            if self.driver(bdf).as_deref() == want {
                return Ok(());
            }
            if start.elapsed() >= self.timeout {
                let now = self.driver(bdf).unwrap_or_else(|| "none".into());
                return Err(SetupError::Timeout {
                    what: match want {
                        Some(w) => format!("{bdf} not bound to {w} (driver now {now})"),
                        None => format!("{bdf} still bound to {now}"),
                    },
                    after: self.timeout,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Moves the GPU `bdf` to `target` (`vfio-pci` or `nvidia`). Nothing to do when it is
    /// there already; a GPU bound to any other driver is refused.
    pub fn rebind(&self, bdf: &str, target: &str) -> Result<(), SetupError> {
        match self.driver(bdf).as_deref() {
            None | Some(NVIDIA_DRIVER) | Some(VFIO_DRIVER) => {}
            Some(other) => {
                return Err(SetupError::ForeignDriver {
                    pci: bdf.to_string(),
                    driver: other.to_string(),
                })
            }
        }
        self.switch(bdf, Some(target))
    }

    /// Moves `bdf` to `target`, or leaves it unbound (`None`), from whatever driver holds
    /// it: for a GPU's group peers, whose drivers graft recorded before it moved them (the
    /// nvidia driver is asked for its unbind lock first). A target other than vfio-pci is
    /// a function going back where it was: its `driver_override` is cleared afterwards, so
    /// that the host binds it as before.
    pub fn switch(&self, bdf: &str, target: Option<&str>) -> Result<(), SetupError> {
        let dev = self.dev(bdf);
        if !dev.exists() {
            return Err(SetupError::NoPciFunction {
                pci: bdf.to_string(),
                path: dev,
            });
        }
        let current = self.driver(bdf);
        if current.as_deref() == target {
            return Ok(());
        }
        if let Some(from) = current.as_deref() {
            if from == NVIDIA_DRIVER {
                self.unbind_lock(bdf)?;
            }
            self.write(&dev.join("driver/unbind"), bdf)?;
            self.wait_driver(bdf, None)?;
        }
        let Some(target) = target else {
            return self.write(&dev.join("driver_override"), "\n");
        };
        self.write(&dev.join("driver_override"), target)?;
        let bind = self.sys.join("bus/pci/drivers").join(target).join("bind");
        if let Err(e) = self.write(&bind, bdf) {
            let _ = self.write(&dev.join("driver_override"), "\n");
            return Err(e);
        }
        self.wait_driver(bdf, Some(target))?;
        if target != VFIO_DRIVER && target != NVIDIA_DRIVER {
            self.write(&dev.join("driver_override"), "\n")?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests;
