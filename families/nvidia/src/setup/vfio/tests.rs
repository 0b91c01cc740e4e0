use super::*;
use crate::devices::{peers_attribute, PciTree};
use std::os::unix::fs::symlink;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A fake sysfs with one GPU bound to nvidia (more functions can be added), and a thread
/// that plays the kernel: it acts on writes to the drivers' bind and unbind files, binding
/// only as `driver_override` allows.
pub struct FakeKernel {
    pub sys: tempfile::TempDir,
    pub proc: tempfile::TempDir,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

pub const BDF: &str = "0000:18:00.0";
pub const GROUP: u32 = 41;

/// One pass of the fake kernel over every driver's bind and unbind files.
fn kernel_pass(sys: &Path) {
    let Ok(drivers) = std::fs::read_dir(sys.join("bus/pci/drivers")) else {
        return;
    };
    for drv in drivers.flatten().map(|e| e.path()) {
        let Some(name) = drv.file_name().and_then(|n| n.to_str()).map(String::from) else {
            continue;
        };
        let unbind = std::fs::read_to_string(drv.join("unbind")).unwrap_or_default();
        let bdf = unbind.trim();
        if !bdf.is_empty() {
            let link = sys.join("bus/pci/devices").join(bdf).join("driver");
            if PciTree::at(sys).driver(bdf).as_deref() == Some(name.as_str()) {
                let _ = std::fs::remove_file(&link);
            }
            std::fs::write(drv.join("unbind"), "").unwrap();
        }
        let bind = std::fs::read_to_string(drv.join("bind")).unwrap_or_default();
        let bdf = bind.trim();
        if !bdf.is_empty() {
            let dev = sys.join("bus/pci/devices").join(bdf);
            let over = std::fs::read_to_string(dev.join("driver_override")).unwrap_or_default();
            let allowed = matches!(over.trim(), "" | "(null)") || over.trim() == name;
            let link = dev.join("driver");
            if allowed && std::fs::symlink_metadata(&link).is_err() {
                symlink(&drv, &link).unwrap();
            }
            std::fs::write(drv.join("bind"), "").unwrap();
        }
    }
}

impl FakeKernel {
    pub fn start(gpu_in_use: bool) -> Self {
        let sys = tempfile::tempdir().unwrap();
        let proc = tempfile::tempdir().unwrap();
        let mut k = FakeKernel {
            sys,
            proc,
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
        };
        k.add_function(BDF, "0x10de", "0x030200", Some(GROUP), Some("nvidia"));
        // A function of another vendor, in no group, which must be ignored.
        k.add_function("0000:00:1f.0", "0x8086", "0x060100", None, None);
        let lock_dir = k.proc.path().join("driver/nvidia/gpus").join(BDF);
        std::fs::create_dir_all(&lock_dir).unwrap();
        if gpu_in_use {
            // The driver never grants the lock: what is written is not read back.
            symlink("/dev/null", lock_dir.join("unbindLock")).unwrap();
        } else {
            std::fs::write(lock_dir.join("unbindLock"), "0").unwrap();
        }
        let flag = k.stop.clone();
        let root = k.sys.path().to_path_buf();
        k.thread = Some(std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                kernel_pass(&root);
                std::thread::sleep(Duration::from_millis(5));
            }
        }));
        k
    }

    /// A PCI function below a root port of its bus, in IOMMU group `group`, bound to
    /// `driver` (whose bind and unbind files are made).
    pub fn add_function(
        &self,
        bdf: &str,
        vendor: &str,
        class: &str,
        group: Option<u32>,
        driver: Option<&str>,
    ) {
        let s = self.sys.path();
        let dev = s.join("devices/pci0000:10/0000:10:01.0").join(bdf);
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("vendor"), format!("{vendor}\n")).unwrap();
        std::fs::write(dev.join("class"), format!("{class}\n")).unwrap();
        std::fs::write(dev.join("device"), "0x2330\n").unwrap();
        std::fs::write(dev.join("driver_override"), "(null)\n").unwrap();
        for d in ["nvidia", "vfio-pci"].iter().chain(driver.iter()) {
            let drv = s.join("bus/pci/drivers").join(d);
            std::fs::create_dir_all(&drv).unwrap();
            for f in ["bind", "unbind"] {
                if !drv.join(f).exists() {
                    std::fs::write(drv.join(f), "").unwrap();
                }
            }
        }
        if let Some(g) = group {
            let gdir = s.join("kernel/iommu_groups").join(g.to_string());
            std::fs::create_dir_all(gdir.join("devices")).unwrap();
            symlink(&gdir, dev.join("iommu_group")).unwrap();
            symlink(&dev, gdir.join("devices").join(bdf)).unwrap();
        }
        if let Some(d) = driver {
            symlink(s.join("bus/pci/drivers").join(d), dev.join("driver")).unwrap();
        }
        std::fs::create_dir_all(s.join("bus/pci/devices")).unwrap();
        symlink(&dev, s.join("bus/pci/devices").join(bdf)).unwrap();
    }

    pub fn vfio(&self, timeout: Duration) -> Vfio {
        Vfio {
            sys: self.sys.path().to_path_buf(),
            proc: self.proc.path().to_path_buf(),
            timeout,
        }
    }

    pub fn override_of(&self, bdf: &str) -> String {
        std::fs::read_to_string(self.vfio(Duration::ZERO).dev(bdf).join("driver_override")).unwrap()
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
fn lists_nvidia_functions_with_group_driver_and_peers() {
    let k = FakeKernel::start(false);
    let f = k.vfio(Duration::from_secs(1)).functions();
    assert_eq!(
        f,
        vec![PciFunction {
            bdf: BDF.into(),
            device_id: "0x2330".into(),
            iommu_group: Some(GROUP),
            driver: Some("nvidia".into()),
            group_peers: Vec::new(),
        }]
    );
    // Its audio function and a bridge join the group: the audio function is a peer.
    k.add_function("0000:18:00.1", "0x10de", "0x040300", Some(GROUP), None);
    k.add_function("0000:17:00.0", "0x10de", "0x060400", Some(GROUP), None);
    let f = k.vfio(Duration::from_secs(1)).functions();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].group_peers, vec!["0000:18:00.1".to_string()]);
}

#[test]
fn round_trip_between_nvidia_and_vfio_pci() {
    let k = FakeKernel::start(false);
    let v = k.vfio(Duration::from_secs(5));
    v.rebind(BDF, "vfio-pci").unwrap();
    assert_eq!(v.driver(BDF).as_deref(), Some("vfio-pci"));
    assert_eq!(k.override_of(BDF), "vfio-pci");
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

#[test]
fn a_gpu_on_another_driver_is_left_alone_but_a_peer_goes_back_to_its_own() {
    let k = FakeKernel::start(false);
    k.add_function(
        "0000:18:00.1",
        "0x10de",
        "0x040300",
        Some(GROUP),
        Some("snd_hda_intel"),
    );
    k.add_function(
        "0000:2a:00.0",
        "0x10de",
        "0x030200",
        Some(42),
        Some("nouveau"),
    );
    let v = k.vfio(Duration::from_secs(5));
    let err = v.rebind("0000:2a:00.0", "vfio-pci").unwrap_err();
    assert!(err.to_string().contains("bound to nouveau"), "{err}");

    let peer = "0000:18:00.1";
    v.switch(peer, Some("vfio-pci")).unwrap();
    assert_eq!(v.driver(peer).as_deref(), Some("vfio-pci"));
    v.switch(peer, Some("snd_hda_intel")).unwrap();
    assert_eq!(v.driver(peer).as_deref(), Some("snd_hda_intel"));
    // Back where it was: no override left pinning it.
    assert_eq!(k.override_of(peer), "\n");
    // A peer that had no driver is left unbound.
    v.switch(peer, None).unwrap();
    assert_eq!(v.driver(peer), None);
}

#[test]
fn group_peers_are_nvidia_functions_only() {
    let k = FakeKernel::start(false);
    let v = k.vfio(Duration::from_secs(1));
    assert_eq!(v.group_peers(BDF).unwrap(), Vec::new());
    k.add_function(
        "0000:18:00.1",
        "0x10de",
        "0x040300",
        Some(GROUP),
        Some("snd_hda_intel"),
    );
    k.add_function(
        "0000:17:00.0",
        "0x8086",
        "0x060400",
        Some(GROUP),
        Some("pcieport"),
    );
    let peers = v.group_peers(BDF).unwrap();
    assert_eq!(
        peers,
        vec![crate::setup::VfioPeer {
            pci_bus_id: "0000:18:00.1".into(),
            driver: Some("snd_hda_intel".into()),
            persistence: false,
        }]
    );
    k.add_function(
        "0000:19:00.0",
        "0x8086",
        "0x020000",
        Some(GROUP),
        Some("ixgbe"),
    );
    let err = v.group_peers(BDF).unwrap_err().to_string();
    assert!(
        err.contains(
            "0000:19:00.0, in the same IOMMU group 41, is not an NVIDIA function (vendor 0x8086)"
        ),
        "{err}"
    );
    assert!(v.group_peers("0000:00:1f.0").is_err());
}

#[test]
fn the_peers_attribute_fits_a_dra_string() {
    assert_eq!(peers_attribute(&[]), "");
    let p = |n: usize| -> Vec<String> { (0..n).map(|i| format!("0000:{i:02x}:00.1")).collect() };
    assert_eq!(peers_attribute(&p(1)), "0000:00:00.1");
    let four = peers_attribute(&p(4));
    assert_eq!(four.len(), 51);
    let ten = peers_attribute(&p(10));
    assert!(ten.len() <= 64, "{ten}");
    assert!(ten.ends_with(",+6"), "{ten}");
    assert_eq!(ten.split(',').count(), 5);
}
