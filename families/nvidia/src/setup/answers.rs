//! The port's questions about the nvidia family's records, answered for its
//! [`DeviceSetup`] implementations (the node's, and fakes that stand in for it in tests):
//! the claim a record is for, whether it keeps another out, the PCI functions it uses.
//!
//! [`DeviceSetup`]: graft_driver_core::claims::setup_port::DeviceSetup

use super::kinds::NvidiaWork;
use graft_driver_core::claims::setup_port::{PciUse, Setup, SetupError};

/// [`NvidiaWork::for_claim`] of a record.
pub fn for_claim(setup: Setup, namespace: &str, claim_uid: &str) -> Result<Setup, SetupError> {
    NvidiaWork::read(&setup)?
        .for_claim(namespace, claim_uid)
        .record()
}

/// [`NvidiaWork::excludes`] of two records: only an IMEX daemon place keeps another
/// out, so no other kind is read. A record the family cannot read keeps nothing out
/// (its claim's unprepare says why).
pub fn excludes(setup: &Setup, held: &Setup) -> Option<SetupError> {
    const DAEMON: &str = "imexDaemon";
    if setup.kind() != DAEMON || held.kind() != DAEMON {
        return None;
    }
    let (a, b) = (NvidiaWork::read(setup).ok()?, NvidiaWork::read(held).ok()?);
    a.excludes(&b)
}

/// [`NvidiaWork::pci`] of a record: only passthrough and a time slice use a function,
/// so no other kind is read.
pub fn pci(setup: &Setup) -> Option<PciUse> {
    if !matches!(setup.kind(), "vfio" | "timeSlice") {
        return None;
    }
    NvidiaWork::read(setup).ok()?.pci()
}
