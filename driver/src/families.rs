//! The device families graft-driver knows: the registry, one entry per family in
//! [`FAMILIES`]. A new family is a crate over graft-driver-core (or a folder of
//! graft-generic-families) and its entry here: its `--discovery` name, how its backend is
//! opened, and its part of the opaque configuration if it has one. A family with flags of
//! its own adds them to [`Flags`] too. graft-driver-core's `discovery` says what a family
//! implements. Nothing else names the families.

use std::sync::Arc;

use graft_driver_core::backend::{Backend, BackendError, Node};
use graft_driver_core::opaque::{OpaqueFamilies, OpaqueFamily};
use graft_generic_families::char::backend::CharBackend;
use graft_generic_families::files::backend::FilesBackend;
use graft_generic_families::render::backend::RenderBackend;
use graft_nvidia::backend::{NvidiaBackend, NvidiaFlags};
use graft_nvidia::opaque::NvidiaOpaqueFamily;

/// Every family graft-driver can serve, in the order `--discovery`'s error lists them.
pub const FAMILIES: &[Registered] = &[
    // Device nodes listed in the devices config.
    Registered {
        name: "char",
        open: |node, _| Ok(Box::new(CharBackend::new(node)?)),
        opaque: None,
    },
    // Entries of served directories listed in the devices config.
    Registered {
        name: "files",
        open: |node, _| Ok(Box::new(FilesBackend::new(node)?)),
        opaque: None,
    },
    // NVIDIA GPUs, MIG devices, IMEX channels, VFIO passthrough.
    Registered {
        name: "nvidia",
        open: |node, flags| Ok(Box::new(NvidiaBackend::new(node, &flags.nvidia)?)),
        opaque: Some(|| Arc::new(NvidiaOpaqueFamily)),
    },
    // DRM render nodes (/dev/dri/renderD<N>).
    Registered {
        name: "render",
        open: |node, _| Ok(Box::new(RenderBackend::new(node))),
        opaque: None,
    },
];

/// The flags of the families that have their own (each group a family's).
#[derive(Debug, Clone, clap::Args)]
pub struct Flags {
    /// `--nvidia-*`, the GPU health flags and the device plugin guard's.
    #[command(flatten)]
    pub nvidia: NvidiaFlags,
}

/// How a family's backend is opened.
pub type Open = fn(&Node, &Flags) -> Result<Box<dyn Backend>, BackendError>;

/// One family's entry in the registry.
pub struct Registered {
    /// Its `--discovery` spelling and its discovery's name.
    pub name: &'static str,
    /// Its backend, from the node's settings and the families' flags.
    pub open: Open,
    /// Its fields and kinds of the claims' opaque configuration, if it has any.
    pub opaque: Option<fn() -> Arc<dyn OpaqueFamily>>,
}

/// The families' parts of the opaque configuration. Every family's fields and kinds are
/// known whichever families `--discovery` serves, so that a claim is read the same
/// everywhere.
pub fn opaque() -> OpaqueFamilies {
    OpaqueFamilies::new(
        FAMILIES
            .iter()
            .filter_map(|f| f.opaque)
            .map(|f| f())
            .collect(),
    )
}

/// A device family graft-driver can serve (`--discovery`, comma separated): its entry.
#[derive(Clone, Copy)]
pub struct Family(&'static Registered);

impl Family {
    /// The family's name: its `--discovery` spelling and its discovery's name.
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// One name of `--discovery`'s list; blanks around it are allowed.
    pub fn parse(s: &str) -> Result<Family, UnknownFamily> {
        let s = s.trim();
        FAMILIES
            .iter()
            .find(|f| f.name == s)
            .map(Family)
            .ok_or_else(|| UnknownFamily(s.to_string()))
    }

    /// The family's backend, from the node's settings and the flags.
    pub fn open(self, node: &Node, flags: &Flags) -> Result<Box<dyn Backend>, BackendError> {
        (self.0.open)(node, flags)
    }
}

impl PartialEq for Family {
    fn eq(&self, other: &Family) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Family {}

impl std::fmt::Debug for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Family({})", self.name())
    }
}

/// A `--discovery` name that is no family's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown backend {0:?} (known: {known})", known = known())]
pub struct UnknownFamily(pub String);

/// Every family's name, as `--discovery` lists them.
fn known() -> String {
    let names: Vec<&str> = FAMILIES.iter().map(|f| f.name).collect();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_parse_as_discovery_always_took_them() {
        let name = |s: &str| Family::parse(s).map(Family::name);
        assert_eq!(name("nvidia"), Ok("nvidia"));
        assert_eq!(name(" files "), Ok("files"));
        assert_eq!(name("char"), Ok("char"));
        let err = Family::parse("gpu").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown backend \"gpu\" (known: char, files, nvidia, render)"
        );
        assert!(Family::parse("").is_err());
        for f in FAMILIES {
            assert_eq!(name(f.name), Ok(f.name));
        }
    }

    #[test]
    fn every_family_with_an_opaque_part_is_given_to_the_core() {
        let with_part = FAMILIES.iter().filter(|f| f.opaque.is_some()).count();
        assert_eq!(with_part, 1);
        // NVIDIA's fields and kinds, known to the parse.
        let families = opaque();
        assert!(
            families.fields().any(|f| f == "sharing"),
            "{:?}",
            families.fields().collect::<Vec<_>>()
        );
        assert!(families.kinds().any(|k| k == "ComputeDomainChannelConfig"));
    }
}
