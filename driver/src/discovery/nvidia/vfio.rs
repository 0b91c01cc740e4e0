//! VFIO passthrough through sysfs: NVIDIA PCI functions and their IOMMU groups, and moving
//! a function between the nvidia and vfio-pci drivers. The sysfs and procfs roots are
//! parameters, so the logic runs against a fake tree in tests.

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
}

pub struct Vfio {
    pub sys: PathBuf,
    pub proc: PathBuf,
    /// How long to wait for the GPU to be free (unbindLock) and for a bind to show.
    pub timeout: Duration,
}

const NVIDIA_VENDOR: &str = "0x10de";

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
                Some(PciFunction {
                    device_id: read_trim(&dir.join("device")).unwrap_or_default(),
                    iommu_group: basename_of_link(&dir.join("iommu_group"))
                        .and_then(|g| g.parse().ok()),
                    driver: basename_of_link(&dir.join("driver")),
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

    /// Moves `bdf` to `target` (`vfio-pci` or `nvidia`). Nothing to do when it is there
    /// already; a function bound to any other driver is refused.
    pub fn rebind(&self, bdf: &str, target: &str) -> Result<(), SetupError> {
        let dev = self.dev(bdf);
        if !dev.exists() {
            return Err(SetupError::NoPciFunction {
                pci: bdf.to_string(),
                path: dev,
            });
        }
        let current = self.driver(bdf);
        if current.as_deref() == Some(target) {
            return Ok(());
        }
        match current.as_deref() {
            Some("nvidia") => {
                self.unbind_lock(bdf)?;
                self.write(&dev.join("driver/unbind"), bdf)?;
                self.wait_driver(bdf, None)?;
            }
            Some("vfio-pci") => {
                self.write(&dev.join("driver/unbind"), bdf)?;
                self.wait_driver(bdf, None)?;
            }
            Some(other) => {
                return Err(SetupError::ForeignDriver {
                    pci: bdf.to_string(),
                    driver: other.to_string(),
                })
            }
            None => {}
        }
        self.write(&dev.join("driver_override"), target)?;
        let bind = self.sys.join("bus/pci/drivers").join(target).join("bind");
        if let Err(e) = self.write(&bind, bdf) {
            let _ = self.write(&dev.join("driver_override"), "\n");
            return Err(e);
        }
        self.wait_driver(bdf, Some(target))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// A fake sysfs with one GPU bound to nvidia, and a thread that plays the kernel: it
    /// acts on writes to the drivers' bind and unbind files.
    pub(crate) struct FakeKernel {
        pub sys: tempfile::TempDir,
        pub proc: tempfile::TempDir,
        stop: Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    pub(crate) const BDF: &str = "0000:18:00.0";

    impl FakeKernel {
        pub(crate) fn start(gpu_in_use: bool) -> Self {
            let sys = tempfile::tempdir().unwrap();
            let proc = tempfile::tempdir().unwrap();
            let s = sys.path();
            for d in ["nvidia", "vfio-pci"] {
                std::fs::create_dir_all(s.join("bus/pci/drivers").join(d)).unwrap();
                std::fs::write(s.join("bus/pci/drivers").join(d).join("bind"), "").unwrap();
                std::fs::write(s.join("bus/pci/drivers").join(d).join("unbind"), "").unwrap();
            }
            std::fs::create_dir_all(s.join("kernel/iommu_groups/41")).unwrap();
            let dev = s.join("devices/pci0000:10/0000:10:01.0").join(BDF);
            std::fs::create_dir_all(&dev).unwrap();
            std::fs::write(dev.join("vendor"), "0x10de\n").unwrap();
            std::fs::write(dev.join("class"), "0x030200\n").unwrap();
            std::fs::write(dev.join("device"), "0x2330\n").unwrap();
            std::fs::write(dev.join("driver_override"), "(null)\n").unwrap();
            symlink(s.join("kernel/iommu_groups/41"), dev.join("iommu_group")).unwrap();
            symlink(s.join("bus/pci/drivers/nvidia"), dev.join("driver")).unwrap();
            std::fs::create_dir_all(s.join("bus/pci/devices")).unwrap();
            symlink(&dev, s.join("bus/pci/devices").join(BDF)).unwrap();
            // A second function of another vendor, which must be ignored.
            let other = s.join("devices/pci0000:00/0000:00:1f.0");
            std::fs::create_dir_all(&other).unwrap();
            std::fs::write(other.join("vendor"), "0x8086\n").unwrap();
            std::fs::write(other.join("class"), "0x060100\n").unwrap();
            symlink(&other, s.join("bus/pci/devices/0000:00:1f.0")).unwrap();
            let lock_dir = proc.path().join("driver/nvidia/gpus").join(BDF);
            std::fs::create_dir_all(&lock_dir).unwrap();
            if gpu_in_use {
                // The driver never grants the lock: what is written is not read back.
                symlink("/dev/null", lock_dir.join("unbindLock")).unwrap();
            } else {
                std::fs::write(lock_dir.join("unbindLock"), "0").unwrap();
            }

            let stop = Arc::new(AtomicBool::new(false));
            let flag = stop.clone();
            let root = s.to_path_buf();
            let thread = std::thread::spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    for d in ["nvidia", "vfio-pci"] {
                        let drv = root.join("bus/pci/drivers").join(d);
                        let link = dev.join("driver");
                        if std::fs::read_to_string(drv.join("unbind"))
                            .unwrap_or_default()
                            .trim()
                            == BDF
                        {
                            std::fs::write(drv.join("unbind"), "").unwrap();
                            let _ = std::fs::remove_file(&link);
                        }
                        if std::fs::read_to_string(drv.join("bind"))
                            .unwrap_or_default()
                            .trim()
                            == BDF
                        {
                            std::fs::write(drv.join("bind"), "").unwrap();
                            let over = std::fs::read_to_string(dev.join("driver_override"))
                                .unwrap_or_default();
                            if over.trim() == d && std::fs::symlink_metadata(&link).is_err() {
                                symlink(&drv, &link).unwrap();
                            }
                        }
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            });
            FakeKernel {
                sys,
                proc,
                stop,
                thread: Some(thread),
            }
        }

        pub(crate) fn vfio(&self, timeout: Duration) -> Vfio {
            Vfio {
                sys: self.sys.path().to_path_buf(),
                proc: self.proc.path().to_path_buf(),
                timeout,
            }
        }
    }

    impl Drop for FakeKernel {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    #[test]
    fn lists_nvidia_functions_with_group_and_driver() {
        let k = FakeKernel::start(false);
        let f = k.vfio(Duration::from_secs(1)).functions();
        assert_eq!(
            f,
            vec![PciFunction {
                bdf: BDF.into(),
                device_id: "0x2330".into(),
                iommu_group: Some(41),
                driver: Some("nvidia".into()),
            }]
        );
    }

    #[test]
    fn round_trip_between_nvidia_and_vfio_pci() {
        let k = FakeKernel::start(false);
        let v = k.vfio(Duration::from_secs(5));
        v.rebind(BDF, "vfio-pci").unwrap();
        assert_eq!(v.driver(BDF).as_deref(), Some("vfio-pci"));
        let over = std::fs::read_to_string(v.dev(BDF).join("driver_override")).unwrap();
        assert_eq!(over, "vfio-pci");
        // Idempotent, then back.
        v.rebind(BDF, "vfio-pci").unwrap();
        v.rebind(BDF, "nvidia").unwrap();
        assert_eq!(v.driver(BDF).as_deref(), Some("nvidia"));
    }

    #[test]
    fn a_busy_gpu_times_out_with_a_clear_error() {
        let k = FakeKernel::start(true);
        let v = k.vfio(Duration::from_millis(500));
        let err = v.rebind(BDF, "vfio-pci").unwrap_err();
        assert!(err.to_string().contains("still in use"), "{err}");
        assert_eq!(v.driver(BDF).as_deref(), Some("nvidia"));
        assert!(v
            .rebind("0000:99:00.0", "vfio-pci")
            .unwrap_err()
            .to_string()
            .contains("not in"));
    }
}
