//! VFIO passthrough through sysfs: moving an NVIDIA PCI function between drivers, with the
//! functions of its IOMMU group. The sysfs and procfs roots are parameters, so the logic
//! runs against a fake tree in tests.
//!
//! What graft writes, and so what must be writable where it runs (the chart's
//! `nvidia.passthrough`): `<sys>/bus/pci/drivers/<driver>/{bind,unbind}`,
//! `<sys>/bus/pci/devices/<bdf>/driver_override` (a link into `<sys>/devices/...`) and the
//! nvidia driver's `<proc>/driver/nvidia/gpus/<bdf>/unbindLock`.
//!
//! A GPU's IOMMU group holds the functions VFIO hands out with it. vfio-pci makes a group
//! usable only when every function in it is bound to a VFIO driver, or to none (PCI
//! bridges excepted: the kernel lets them stay with their own driver), so passing a GPU
//! through moves its audio or USB-C functions, or a second GPU behind the same switch, with
//! it. graft does that only for NVIDIA's functions: it never rebinds another vendor's
//! device of the host.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::kinds::VfioPeer;
use crate::devices::{read_trim, PciFunction, PciTree, NVIDIA_VENDOR};
use crate::setup_error::NvidiaSetupError;
use graft_driver_core::claims::setup_port::SetupError;

/// Moves NVIDIA functions between drivers through sysfs.
pub struct Vfio {
    /// sysfs as this process sees it.
    pub sys: PathBuf,
    /// procfs as this process sees it (the nvidia driver's unbind lock).
    pub proc: PathBuf,
    /// How long to wait for the GPU to be free (unbindLock) and for a bind to show.
    pub timeout: Duration,
}

/// The two drivers a GPU itself is moved between (this one and [`VFIO_DRIVER`]); its
/// group peers go back to their own.
pub const NVIDIA_DRIVER: &str = "nvidia";
/// The driver passthrough binds a GPU to.
pub const VFIO_DRIVER: &str = "vfio-pci";

impl Vfio {
    fn pci(&self) -> PciTree<'_> {
        PciTree::at(&self.sys)
    }

    fn dev(&self, bdf: &str) -> PathBuf {
        self.pci().device_dir(bdf)
    }

    /// NVIDIA functions of display class (0x03xxxx), sorted by address.
    pub fn functions(&self) -> Vec<PciFunction> {
        self.pci().functions()
    }

    /// The driver `bdf` is bound to.
    pub fn driver(&self, bdf: &str) -> Option<String> {
        self.pci().driver(bdf)
    }

    /// The IOMMU group of `bdf`.
    pub fn iommu_group(&self, bdf: &str) -> Option<u32> {
        self.pci().iommu_group(bdf)
    }

    /// The functions of IOMMU group `group`, sorted.
    pub fn group_members(&self, group: u32) -> Result<Vec<String>, SetupError> {
        self.pci()
            .group_members(group)
            .map_err(|source| SetupError::Io {
                op: "listing IOMMU group".into(),
                path: self.pci().group_dir(group),
                source,
            })
    }

    fn is_bridge(&self, bdf: &str) -> bool {
        self.pci().is_bridge(bdf)
    }

    /// The other functions of `bdf`'s IOMMU group that go to vfio-pci with it, each with
    /// the driver it has now, or why the group cannot be passed through: a function of
    /// another vendor in it, or a group that cannot be read.
    pub fn group_peers(&self, bdf: &str) -> Result<Vec<VfioPeer>, SetupError> {
        let group = self
            .iommu_group(bdf)
            .ok_or_else(|| SetupError::NoIommuGroup {
                pci: bdf.to_string(),
            })?;
        let mut peers = Vec::new();
        for peer in self.group_members(group)? {
            if peer == bdf || self.is_bridge(&peer) {
                continue;
            }
            let refuse = |reason: String| SetupError::GroupPeer {
                pci: bdf.to_string(),
                group,
                peer: peer.clone(),
                reason,
            };
            match self.pci().vendor(&peer) {
                Some(v) if v == NVIDIA_VENDOR => {}
                Some(v) => {
                    return Err(refuse(format!(
                        "is not an NVIDIA function (vendor {v}), and graft rebinds no other \
                         device of the host"
                    )))
                }
                None => return Err(refuse("cannot be read in sysfs".into())),
            }
            peers.push(VfioPeer {
                driver: self.driver(&peer),
                pci_bus_id: peer,
                persistence: false,
            });
        }
        Ok(peers)
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
                return Err(NvidiaSetupError::ForeignDriver {
                    pci: bdf.to_string(),
                    driver: other.to_string(),
                }
                .into())
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
pub mod tests;
