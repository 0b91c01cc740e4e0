//! The device families graft-driver knows: the registry. A new family is a crate (or a
//! folder of graft-generic-families) with its [`Backend`], and a variant here with its name
//! and its arm in [`Family::open`] (plus its flags in [`Flags`] if it has any, and its part
//! of the opaque configuration in [`opaque`] if it has one). graft-driver-core's
//! `discovery` says what a family implements. Nothing else names the families.

use std::sync::Arc;

use graft_driver_core::backend::{Backend, BackendError, Node};
use graft_driver_core::opaque::OpaqueFamilies;
use graft_generic_families::char::backend::CharBackend;
use graft_generic_families::files::backend::FilesBackend;
use graft_generic_families::render::backend::RenderBackend;
use graft_nvidia::backend::{NvidiaBackend, NvidiaFlags};
use graft_nvidia::opaque::NvidiaOpaqueFamily;

/// The families' parts of the opaque configuration. Every family's fields and kinds are
/// known whichever families `--discovery` serves, so that a claim is read the same
/// everywhere.
pub fn opaque() -> OpaqueFamilies {
    OpaqueFamilies::new(vec![Arc::new(NvidiaOpaqueFamily)])
}

/// A device family graft-driver can serve (`--discovery`, comma separated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Family {
    /// Device nodes listed in the devices config.
    Char,
    /// Entries of served directories listed in the devices config.
    Files,
    /// NVIDIA GPUs, MIG devices, IMEX channels, VFIO passthrough.
    Nvidia,
    /// DRM render nodes (`/dev/dri/renderD<N>`).
    Render,
}

impl Family {
    /// The family's name: its `--discovery` spelling and its discovery's name.
    pub fn name(self) -> &'static str {
        match self {
            Family::Char => "char",
            Family::Files => "files",
            Family::Nvidia => "nvidia",
            Family::Render => "render",
        }
    }

    /// One name of `--discovery`'s list; blanks around it are allowed.
    pub fn parse(s: &str) -> Result<Family, UnknownFamily> {
        let s = s.trim();
        <Family as clap::ValueEnum>::from_str(s, false).map_err(|_| UnknownFamily(s.to_string()))
    }

    /// The family's backend, from the node's settings and the flags.
    pub fn open(self, node: &Node, flags: &Flags) -> Result<Box<dyn Backend>, BackendError> {
        Ok(match self {
            Family::Char => Box::new(CharBackend::new(node)?),
            Family::Files => Box::new(FilesBackend::new(node)?),
            Family::Nvidia => Box::new(NvidiaBackend::new(node, &flags.nvidia)?),
            Family::Render => Box::new(RenderBackend::new(node)),
        })
    }
}

/// The flags of the families that have their own (each group a family's).
#[derive(Debug, Clone, clap::Args)]
pub struct Flags {
    /// `--nvidia-*` and the GPU health flags.
    #[command(flatten)]
    pub nvidia: NvidiaFlags,
}

/// A `--discovery` name that is no family's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown backend {0:?} (known: {known})", known = known())]
pub struct UnknownFamily(pub String);

/// Every family's name, as `--discovery` lists them.
fn known() -> String {
    let names: Vec<&str> = <Family as clap::ValueEnum>::value_variants()
        .iter()
        .map(|f| f.name())
        .collect();
    names.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_parse_as_discovery_always_took_them() {
        assert_eq!(Family::parse("nvidia"), Ok(Family::Nvidia));
        assert_eq!(Family::parse(" files "), Ok(Family::Files));
        assert_eq!(Family::parse("char"), Ok(Family::Char));
        let err = Family::parse("gpu").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown backend \"gpu\" (known: char, files, nvidia, render)"
        );
        assert!(Family::parse("").is_err());
        for f in [Family::Char, Family::Files, Family::Nvidia, Family::Render] {
            assert_eq!(Family::parse(f.name()), Ok(f));
        }
    }
}
