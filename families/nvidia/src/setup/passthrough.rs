//! The nvidia setup's passthrough: a GPU and its IOMMU group peers moved to vfio-pci at
//! prepare, with persistence mode off while they are, and moved back at unprepare.
//!
//! What is planned (under the checkpoint's lock, before anything is done) is all that undo
//! needs: the peers with the drivers they had, and which GPUs had persistence mode on. So a
//! driver killed half way puts back exactly what it found. Whether another claim holds a
//! function of the group is checked with the other claims, in the core's plan
//! ([`NvidiaWork::passed_through`]).

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::time::{Duration, Instant};

use graft_record::{ContainerEdits, DeviceKind, DeviceNode, EnvVar};
use nix::sys::stat::{major, minor};

use super::kinds::NvidiaWork;
use super::node::NvidiaSetup;
use super::vfio::{NVIDIA_DRIVER, VFIO_DRIVER};
use graft_driver_core::claims::setup_port::SetupError;

/// A char device node as it is on the host, read with stat.
fn stat_node(dev_root: &Path, rel: &str) -> Result<DeviceNode, SetupError> {
    let p = dev_root.join(rel);
    let md = std::fs::metadata(&p).map_err(|source| SetupError::Io {
        op: "stat".into(),
        path: p.clone(),
        source,
    })?;
    if !md.file_type().is_char_device() {
        return Err(SetupError::NotCharDevice { path: p });
    }
    let rdev = md.rdev();
    Ok(DeviceNode {
        path: format!("/dev/{rel}"),
        kind: DeviceKind::Char,
        major: i64::try_from(major(rdev)).unwrap_or(i64::MAX),
        minor: i64::try_from(minor(rdev)).unwrap_or(i64::MAX),
        file_mode: Some(md.mode() & 0o777),
        uid: None,
        gid: None,
    })
}

/// The functions of a VFIO setup with their persistence flag: the GPU first.
fn with_persistence(setup: &NvidiaWork) -> Vec<(&str, bool)> {
    match setup {
        NvidiaWork::Vfio {
            pci_bus_id,
            persistence,
            peers,
        } => std::iter::once((pci_bus_id.as_str(), *persistence))
            .chain(peers.iter().map(|p| (p.pci_bus_id.as_str(), p.persistence)))
            .collect(),
        _ => Vec::new(),
    }
}

/// The passthrough steps of the nvidia setup's plan, apply and undo.
pub trait Passthrough {
    /// Passthrough of `pci`: its group's other functions and their drivers, and which of
    /// them have persistence mode on; or why the group cannot go.
    fn plan_vfio(&self, pci: &str) -> Result<NvidiaWork, SetupError>;
    /// The planned functions moved to vfio-pci (persistence mode off first where it was
    /// on); the edits that hand the group's node to the container.
    fn apply_vfio(&self, setup: &NvidiaWork) -> Result<ContainerEdits, SetupError>;
    /// Every function back on the driver it had, persistence mode back on where it was;
    /// the first failure is returned once all were tried (the kubelet's retry tries again).
    fn undo_vfio(&self, setup: &NvidiaWork) -> Result<(), SetupError>;
}

impl Passthrough for NvidiaSetup {
    fn plan_vfio(&self, pci: &str) -> Result<NvidiaWork, SetupError> {
        let mut peers = self.vfio.group_peers(pci)?;
        for p in &mut peers {
            p.persistence = self.persistence_on(&p.pci_bus_id, p.driver.as_deref())?;
        }
        Ok(NvidiaWork::Vfio {
            pci_bus_id: pci.to_string(),
            persistence: self.persistence_on(pci, self.vfio.driver(pci).as_deref())?,
            peers,
        })
    }

    fn apply_vfio(&self, setup: &NvidiaWork) -> Result<ContainerEdits, SetupError> {
        let NvidiaWork::Vfio {
            pci_bus_id, peers, ..
        } = setup
        else {
            return Err(SetupError::NoBackend);
        };
        for (pci, on) in with_persistence(setup) {
            // A retry finds it moved already: nvidia-smi would not find it.
            if on && self.vfio.driver(pci).as_deref() == Some(NVIDIA_DRIVER) {
                let args = ["-i", pci, "-pm", "0"].map(String::from);
                self.smi.run(&args)?;
            }
        }
        self.vfio.rebind(pci_bus_id, VFIO_DRIVER)?;
        for p in peers {
            self.vfio.switch(&p.pci_bus_id, Some(VFIO_DRIVER))?;
        }
        self.vfio_edits(pci_bus_id)
    }

    fn undo_vfio(&self, setup: &NvidiaWork) -> Result<(), SetupError> {
        let NvidiaWork::Vfio {
            pci_bus_id, peers, ..
        } = setup
        else {
            return Err(SetupError::NoBackend);
        };
        let mut first: Option<SetupError> = None;
        let mut back = Vec::new();
        match self.vfio.rebind(pci_bus_id, NVIDIA_DRIVER) {
            Ok(()) => back.push(pci_bus_id.as_str()),
            Err(e) => first = first.or(Some(e)),
        }
        for p in peers {
            match self.vfio.switch(&p.pci_bus_id, p.driver.as_deref()) {
                Ok(()) => back.push(p.pci_bus_id.as_str()),
                Err(e) => first = first.or(Some(e)),
            }
        }
        for (pci, on) in with_persistence(setup) {
            if on && back.contains(&pci) {
                self.enable_persistence(pci);
            }
        }
        (self.rescan)();
        first.map_or(Ok(()), Err)
    }
}

impl NvidiaSetup {
    /// Whether graft must turn `pci`'s persistence mode off: a GPU on nvidia with it on.
    fn persistence_on(&self, pci: &str, driver: Option<&str>) -> Result<bool, SetupError> {
        if driver != Some(NVIDIA_DRIVER) {
            return Ok(false);
        }
        Ok(self.persistence.enabled(pci)?.unwrap_or(false))
    }

    /// Persistence mode back on, retried while the GPU comes back to NVML. A GPU that does
    /// not come back in time is left as it is, with an error logged: it works, only its
    /// first client starts slower, and failing the unprepare would keep the claim forever.
    fn enable_persistence(&self, pci: &str) {
        let start = Instant::now();
        loop {
            match self.persistence.enable(pci) {
                Ok(()) => {
                    tracing::info!(gpu = pci, "persistence mode back on");
                    return;
                }
                Err(e) if start.elapsed() >= self.vfio.timeout => {
                    tracing::error!(gpu = pci, error = %e, "persistence mode left off: turn it on with nvidia-smi -i <bus id> -pm 1");
                    return;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    fn vfio_edits(&self, pci: &str) -> Result<ContainerEdits, SetupError> {
        let group = self
            .vfio
            .iommu_group(pci)
            .ok_or_else(|| SetupError::NoIommuGroup {
                pci: pci.to_string(),
            })?;
        // vfio-pci creates the group node when it binds; give udev/devtmpfs a moment.
        let start = Instant::now();
        let node = loop {
            match stat_node(&self.dev_root, &format!("vfio/{group}")) {
                Ok(n) => break n,
                Err(e) if start.elapsed() >= self.vfio.timeout => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        Ok(ContainerEdits {
            device_nodes: vec![stat_node(&self.dev_root, "vfio/vfio")?, node],
            env: vec![EnvVar {
                name: "NVIDIA_VISIBLE_DEVICES".into(),
                value: "void".into(),
            }],
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use super::super::kinds::VfioPeer;
    use super::super::persistence::PersistenceMode;
    use super::super::smi::Smi;
    use super::super::vfio::tests::{FakeKernel, BDF, GROUP};
    use super::*;
    use graft_driver_core::claims::setup_port::DeviceSetup;

    const AUDIO: &str = "0000:18:00.1";

    /// Persistence mode by PCI function, as NVML and nvidia-smi would share it.
    #[derive(Clone, Default)]
    struct Modes(Arc<Mutex<BTreeMap<String, bool>>>);

    impl PersistenceMode for Modes {
        fn enabled(&self, pci: &str) -> Result<Option<bool>, SetupError> {
            Ok(self.0.lock().unwrap().get(pci).copied())
        }
        fn enable(&self, pci: &str) -> Result<(), SetupError> {
            self.0.lock().unwrap().insert(pci.into(), true);
            Ok(())
        }
    }

    /// nvidia-smi: records its calls; `-pm 0` turns the mode off.
    struct ModeSmi(Modes, Arc<Mutex<Vec<String>>>);

    impl Smi for ModeSmi {
        fn run(&self, args: &[String]) -> Result<(), SetupError> {
            self.1.lock().unwrap().push(args.join(" "));
            if let [i, pci, pm, zero] = args {
                if (i.as_str(), pm.as_str(), zero.as_str()) == ("-i", "-pm", "0") {
                    self.0 .0.lock().unwrap().insert(pci.clone(), false);
                }
            }
            Ok(())
        }
    }

    fn mknod(dev: &Path, name: &str, major: u64, minor: u64) {
        std::fs::create_dir_all(dev.join(name).parent().unwrap()).unwrap();
        nix::sys::stat::mknod(
            &dev.join(name),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(major, minor),
        )
        .unwrap_or_else(|e| panic!("mknod {name}: {e}"));
    }

    #[test]
    fn the_group_goes_together_with_persistence_off_and_comes_back() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: mknod needs root");
            return;
        }
        let k = FakeKernel::start(false);
        k.add_function(
            AUDIO,
            "0x10de",
            "0x040300",
            Some(GROUP),
            Some("snd_hda_intel"),
        );
        let dev = tempfile::tempdir().unwrap();
        mknod(dev.path(), "vfio/vfio", 10, 196);
        mknod(dev.path(), &format!("vfio/{GROUP}"), 511, 0);
        let modes = Modes::default();
        modes.0.lock().unwrap().insert(BDF.into(), true);
        let calls = Arc::new(Mutex::new(Vec::new()));
        let s = NvidiaSetup {
            vfio: k.vfio(Duration::from_secs(5)),
            dev_root: dev.path().to_path_buf(),
            smi: Box::new(ModeSmi(modes.clone(), calls.clone())),
            persistence: Box::new(modes.clone()),
            rescan: Box::new(|| {}),
            mig: None,
            mps: None,
            domains: Default::default(),
        };
        let plan = s.plan_vfio(BDF).unwrap();
        assert_eq!(
            plan,
            NvidiaWork::Vfio {
                pci_bus_id: BDF.into(),
                persistence: true,
                peers: vec![VfioPeer {
                    pci_bus_id: AUDIO.into(),
                    driver: Some("snd_hda_intel".into()),
                    persistence: false,
                }],
            }
        );
        assert_eq!(plan.passed_through(), vec![BDF, AUDIO]);
        let record = plan.record().unwrap();

        let edits = s.apply(&record).unwrap().unwrap();
        let nodes: Vec<(String, i64, i64)> = edits
            .device_nodes
            .iter()
            .map(|n| (n.path.clone(), n.major, n.minor))
            .collect();
        assert_eq!(
            nodes,
            vec![
                ("/dev/vfio/vfio".into(), 10, 196),
                (format!("/dev/vfio/{GROUP}"), 511, 0)
            ]
        );
        assert_eq!(*calls.lock().unwrap(), vec![format!("-i {BDF} -pm 0")]);
        assert_eq!(modes.enabled(BDF).unwrap(), Some(false));
        for f in [BDF, AUDIO] {
            assert_eq!(s.vfio.driver(f).as_deref(), Some("vfio-pci"), "{f}");
        }
        // A retry of the same setup finds it done, and asks nvidia-smi nothing.
        s.apply(&record).unwrap();
        assert_eq!(calls.lock().unwrap().len(), 1);

        s.undo(&record).unwrap();
        assert_eq!(s.vfio.driver(BDF).as_deref(), Some("nvidia"));
        assert_eq!(s.vfio.driver(AUDIO).as_deref(), Some("snd_hda_intel"));
        assert_eq!(modes.enabled(BDF).unwrap(), Some(true));
        // Idempotent.
        s.undo(&record).unwrap();

        // A group holding another vendor's device is refused before anything is done.
        k.add_function(
            "0000:19:00.0",
            "0x8086",
            "0x020000",
            Some(GROUP),
            Some("ixgbe"),
        );
        let err = s.plan_vfio(BDF).unwrap_err().to_string();
        assert!(err.contains("graft rebinds no other device"), "{err}");
    }
}
