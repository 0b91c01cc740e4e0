//! What [`NvidiaSetup`] plans for a device from its typed identity, and how it applies and
//! undoes each setup: passthrough (`passthrough`), time-slicing through nvidia-smi (NVML
//! has no call for the compute time slice), dynamic-MIG instances, MPS shares and
//! ComputeDomains' devices (`domain`; with ComputeDomains on, no channel without one).

use graft_api::capacity::{COMPUTE, MEMORY};
use graft_record::ContainerEdits;

use super::answers;
use super::dynamic_mig::MigManager;
use super::kinds::NvidiaWork;
use super::mps::{MpsManager, Share};
use super::node::NvidiaSetup;
use super::passthrough::Passthrough;
use crate::devices::{Identity, Placement};
use crate::opaque::NvidiaOpaque;
use crate::setup_error::NvidiaSetupError;
use graft_driver_core::claims::setup_port::{DeviceSetup, PciUse, Setup, SetupError};
use graft_driver_core::model::Allocated;
use graft_driver_core::model::{Device, Kind};
use graft_driver_core::opaque::DeviceConfig;

/// A share of an MPS GPU, from what the scheduler allocated: the compute percentage and
/// memory it consumed (its defaults, the whole GPU, when the API server gave none).
fn mps_setup(id: &Identity, alloc: &Allocated) -> Result<NvidiaWork, &'static str> {
    let uuid = id
        .uuid
        .as_deref()
        .ok_or("an MPS GPU without its uuid attribute")?;
    // A static MIG device's daemon runs on its parent's node, with its instances' access.
    let (minor, mig) = match id.mig {
        Some((parent, ids)) => (parent, Some(ids)),
        None => (
            id.minor.ok_or("an MPS GPU without its minor attribute")?,
            None,
        ),
    };
    let compute = match alloc.consumed.get(COMPUTE) {
        Some(q) => graft_driver_core::quantity::parse(q)
            .and_then(|v| u32::try_from(v).ok())
            .filter(|v| (1..=100).contains(v))
            .ok_or("consumed compute is not a whole percentage from 1 to 100")?,
        None => 100,
    };
    let memory_mib = match alloc.consumed.get(MEMORY) {
        Some(q) => Some(
            graft_driver_core::quantity::parse(q)
                .and_then(|b| u64::try_from(b >> 20).ok())
                .filter(|&m| m > 0)
                .ok_or("consumed memory is not a whole quantity of at least 1Mi")?,
        ),
        None => None,
    };
    Ok(NvidiaWork::Mps {
        gpu_uuid: uuid.to_string(),
        minor,
        mig,
        share: alloc.share_id.clone().unwrap_or_else(|| "whole".into()),
        compute,
        memory_mib,
        // The core stamps the claim's (NvidiaWork::for_claim).
        namespace: String::new(),
        claim_uid: String::new(),
    })
}

/// A dynamic MIG placement's setup, from what discovery published about it.
fn mig_setup(p: &Placement) -> NvidiaWork {
    NvidiaWork::Mig {
        gpu_uuid: p.parent_uuid.clone(),
        profile: p.profile,
        start: p.start,
        size: p.size,
        slices: p.slices,
    }
}

impl NvidiaSetup {
    fn mps_manager(&self) -> Result<&MpsManager, SetupError> {
        self.mps.as_ref().ok_or_else(|| {
            NvidiaSetupError::Mps {
                reason: "no GPU is shared through MPS on this node (--nvidia-mps), yet a claim \
                     holds an MPS share; turn it back on to release it"
                    .into(),
            }
            .into()
        })
    }

    fn mig_manager(&self) -> Result<&MigManager, SetupError> {
        self.mig.as_ref().ok_or_else(|| {
            NvidiaSetupError::Mig {
                reason:
                    "dynamic MIG is off on this node (--nvidia-dynamic-mig), yet a claim holds a \
                     MIG instance graft made; turn it back on to remove the instance"
                        .into(),
            }
            .into()
        })
    }

    fn set_timeslice(&self, pci: &str, interval: u32) -> Result<(), SetupError> {
        let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        if interval != 0 {
            self.smi.run(&s(&["-i", pci, "-c", "DEFAULT"]))?;
        }
        self.smi.run(&s(&[
            "compute-policy",
            "-i",
            pci,
            "--set-timeslice",
            &interval.to_string(),
        ]))
    }
}

impl DeviceSetup for NvidiaSetup {
    fn plan(
        &self,
        device: &Device,
        config: Option<&DeviceConfig>,
        alloc: &Allocated,
    ) -> Result<Option<Setup>, SetupError> {
        self.plan_work(device, config, alloc)?
            .map(|w| w.record())
            .transpose()
    }

    fn apply(&self, setup: &Setup) -> Result<Option<ContainerEdits>, SetupError> {
        self.apply_work(&NvidiaWork::read(setup)?)
    }

    fn undo(&self, setup: &Setup) -> Result<(), SetupError> {
        self.undo_work(&NvidiaWork::read(setup)?)
    }

    fn for_claim(
        &self,
        setup: Setup,
        namespace: &str,
        claim_uid: &str,
    ) -> Result<Setup, SetupError> {
        answers::for_claim(setup, namespace, claim_uid)
    }

    fn excludes(&self, setup: &Setup, held: &Setup) -> Option<SetupError> {
        answers::excludes(setup, held)
    }

    fn pci(&self, setup: &Setup) -> Option<PciUse> {
        answers::pci(setup)
    }
}

impl NvidiaSetup {
    /// What preparing `device` with `config` for `alloc` needs.
    fn plan_work(
        &self,
        device: &Device,
        config: Option<&DeviceConfig>,
        alloc: &Allocated,
    ) -> Result<Option<NvidiaWork>, SetupError> {
        let nvidia = config.and_then(|c| c.family.part::<NvidiaOpaque>());
        if let Some(cd) = nvidia.and_then(|n| n.compute_domain.as_ref()) {
            return super::domain::plan(device, cd);
        }
        let sharing = nvidia.and_then(|n| n.sharing.as_ref());
        let id = Identity::of(device);
        let pci = id.pci_bus_id.clone();
        let refuse = |reason| {
            Err(SetupError::NotSupported {
                device: device.name.clone(),
                reason,
            })
        };
        let mps = id.mps;
        match (device.kind, pci, sharing) {
            (Kind::Whole, _, Some(_)) if mps => {
                refuse("this GPU is shared through MPS; time-slicing does not apply")
            }
            (Kind::Whole | Kind::Partition, _, Some(_)) if id.time_shared => refuse(
                "this device is time-sliced among claims (--nvidia-time-slicing); its time \
                 slice is the same for all of them, so no claim's config sets it",
            ),
            (Kind::Whole | Kind::Partition, _, None) if mps => match mps_setup(&id, alloc) {
                Ok(s) => Ok(Some(s)),
                Err(reason) => refuse(reason),
            },
            (Kind::Passthrough, Some(pci), None) => self.plan_vfio(&pci).map(Some),
            (Kind::Passthrough, _, Some(_)) => {
                refuse("a GPU passed through with VFIO cannot be time-sliced")
            }
            (Kind::Whole, Some(pci_bus_id), Some(s)) => Ok(Some(NvidiaWork::TimeSlice {
                pci_bus_id,
                interval: s.interval().smi_value(),
            })),
            (Kind::Partition, _, Some(_)) => {
                refuse("time-slicing applies to full GPUs, not MIG devices")
            }
            (Kind::Partition, _, None) if id.dynamic => match &id.placement {
                Some(p) => Ok(Some(mig_setup(p))),
                None => {
                    refuse("a dynamic MIG placement without its profile and placement attributes")
                }
            },
            (Kind::Channel, _, Some(_)) => refuse("an IMEX channel cannot be time-sliced"),
            // With ComputeDomains on, a node's channels reach the memory of the domain its
            // IMEX daemon serves: a channel with no domain's configuration would pass no
            // gate. Plain channels are for nodes without ComputeDomains.
            (Kind::Channel, _, None) if self.domains.on() => refuse(
                "ComputeDomains are on for this node, so an IMEX channel goes only to a \
                 ComputeDomain's workload claim (its ComputeDomainChannelConfig, from the \
                 domain's ResourceClaimTemplate); a plain channel would reach the memory of \
                 the domain whose IMEX daemon runs here",
            ),
            // Only a domain's daemon claim may hold one (its config returned above).
            (Kind::DomainSlot, _, _) => refuse(
                "an imex-daemon place is for a ComputeDomain's IMEX daemon, whose claim carries \
                 a ComputeDomainDaemonConfig",
            ),
            // A char device with sharing: refused by prepare, which says why.
            _ => Ok(None),
        }
    }

    fn apply_work(&self, setup: &NvidiaWork) -> Result<Option<ContainerEdits>, SetupError> {
        match setup {
            NvidiaWork::Vfio { .. } => self.apply_vfio(setup).map(Some),
            NvidiaWork::TimeSlice {
                pci_bus_id,
                interval,
            } => self.set_timeslice(pci_bus_id, *interval).map(|()| None),
            NvidiaWork::Mig {
                gpu_uuid,
                profile,
                start,
                size,
                slices,
            } => self
                .mig_manager()?
                .create(gpu_uuid, *profile, *start, *size, *slices)
                .map(Some),
            NvidiaWork::Mps { .. } => match Share::of(setup) {
                Some(share) => self.mps_manager()?.open_share(&share).map(Some),
                None => Ok(None),
            },
            NvidiaWork::ComputeDomain { .. } => self.join_domain(setup).map(|()| None),
            // Nothing on the node; the core keeps a second domain's place out.
            NvidiaWork::ImexDaemon { .. } => self.take_daemon_place(setup).map(|()| None),
        }
    }

    fn undo_work(&self, setup: &NvidiaWork) -> Result<(), SetupError> {
        match setup {
            NvidiaWork::Vfio { .. } => self.undo_vfio(setup),
            NvidiaWork::TimeSlice { pci_bus_id, .. } => self.set_timeslice(pci_bus_id, 0),
            NvidiaWork::Mig {
                gpu_uuid,
                profile,
                start,
                ..
            } => self.mig_manager()?.destroy(gpu_uuid, *profile, *start),
            NvidiaWork::Mps { .. } => match Share::of(setup) {
                Some(share) => self.mps_manager()?.close_share(&share),
                None => Ok(()),
            },
            // The label stays for the domain's other claims here; the controller removes it.
            NvidiaWork::ComputeDomain { .. } | NvidiaWork::ImexDaemon { .. } => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
