//! Device discovery: every backend turns what the node has into [`Device`]s, each with the
//! attributes a DeviceClass or CEL selector matches on and the container edits that make
//! it usable. Backends share one trait so the slice publisher and the prepare path do not
//! care where a device came from.
//!
//! A new device family is a crate of its own that depends on this one (as graft-nvidia),
//! or a folder in graft-generic-families when it has no node-side work (as `render`),
//! and its entry in graft-driver's registry (`graft_driver::families::FAMILIES`). It
//! implements:
//! 1. Its [`Discovery`], and its [`crate::backend::Backend`] (discovery, setup route,
//!    start-up work, long-running tasks) with its flags as a `clap::Args` struct if it has
//!    any; a health source, if it has one, feeding a [`crate::health::HealthReport`] (as
//!    graft-nvidia's `health`); a hold on devices it must keep out of the ResourceSlices
//!    for a while ([`crate::model::Holds`], set in `start`, as graft-nvidia's device
//!    plugin guard).
//! 2. [`Kind`]: only if its devices need a setup or configuration of their own (the
//!    compiler then asks for their metrics class); a plain device node is [`Kind::Char`],
//!    as the render family's are.
//! 3. Node-side work that must survive a crash: its own payload type, kept in the
//!    checkpoint as a [`Setup`] record that names the family (see the note there), and
//!    answered for in its [`crate::claims::setup_port::DeviceSetup`] (`for_claim`,
//!    `excludes`, `pci`), as graft-nvidia's `setup::NvidiaWork`.
//! 4. Fields or kinds of its own in the claims' opaque configuration: its types, an
//!    [`crate::opaque::OpaqueFamily`] that takes its fields and parses its kinds, a
//!    [`crate::opaque::FamilyPart`] that merges and answers in its words (as graft-nvidia's
//!    `opaque`), named by its registry entry's `opaque`; the generic parse hands
//!    each family its fields, once per entry, and the family reads its part back with
//!    `FamilyConfig::part`.
//! 5. The chart: its DeviceClass, and its name in `backends` (`graft.discovery`).
//!
//! This module keeps what families share: the devices config ([`config`]), the node's
//! inventory and PCIe topology, and the discovery report.

pub mod config;
pub mod inventory;
pub mod pcie;
pub mod report;

#[cfg(doc)]
use crate::{claims::setup_port::Setup, model::Device, model::Kind};

pub use crate::backend::scan::{Discovery, Unavailable};
pub use pcie::pcie_root;
