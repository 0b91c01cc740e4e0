//! Device discovery: every backend turns what the node has into [`Device`]s, each with the
//! attributes a DeviceClass or CEL selector matches on and the container edits that make
//! it usable. Backends share one trait so the slice publisher and the prepare path do not
//! care where a device came from.
//!
//! A new device family touches these places, and nothing else:
//! 1. A folder `discovery/<family>/`: its [`Discovery`], and in `backend.rs` its
//!    [`crate::backend::Backend`] (discovery, setup route, start-up work, long-running
//!    tasks) with its flags as a `clap::Args` struct if it has any; a health source, if it
//!    has one, in `discovery/<family>/health/` feeding a [`crate::health::HealthReport`]
//!    (as NVIDIA's); and its `pub mod` line below.
//! 2. [`crate::families::Family`]: a variant, its name and its arm in `Family::open` (and
//!    its flags in `families::Flags`).
//! 3. [`Kind`]: only if its devices need a setup or configuration of their own (the
//!    compiler then asks for their metrics class); a plain device node is [`Kind::Char`],
//!    as the render family's are.
//! 4. Node-side work that must survive a crash: its own payload type, kept in the
//!    checkpoint as a [`Setup`] record that names the family (see the note there), and
//!    answered for in its [`crate::claims::setup_port::DeviceSetup`] (`for_claim`,
//!    `excludes`, `pci`), as NVIDIA's [`nvidia::setup::NvidiaWork`].
//! 5. Fields or kinds of its own in the claims' opaque configuration:
//!    `discovery/<family>/opaque.rs` (its types, an [`crate::opaque::OpaqueFamily`] that
//!    takes its fields and parses its kinds, a [`crate::opaque::FamilyPart`] that merges
//!    and answers in its words, as NVIDIA's [`nvidia::opaque`]) and its line in
//!    [`crate::families::opaque`]; the generic parse hands each family its fields, once per
//!    entry, and the family reads its part back with `FamilyConfig::part`.
//! 6. The chart: its DeviceClass, and its name in `backends` (`graft.discovery`).

pub mod char;
pub mod config;
pub mod files;
pub mod inventory;
pub mod nvidia;
pub mod pcie;
pub mod render;
pub mod report;

#[cfg(doc)]
use crate::{claims::setup_port::Setup, model::Device, model::Kind};

pub use crate::backend::scan::{Discovery, Unavailable};
pub use pcie::pcie_root;
