//! The `nvidia` backend: full GPUs, MIG devices (static and dynamic), IMEX channels and
//! VFIO passthrough functions, in four parts that import each other only through their
//! faces (each part's `mod.rs`):
//!
//! - [`nvml`]: the NVML inventory, the MIG management calls, and the one place NVML is
//!   loaded ([`nvml::open`]);
//! - [`driver_files`]: the driver's user-space files on this node, a library of its own
//!   that imports nothing from the other three;
//! - [`devices`]: device assembly, [`NvidiaDiscovery`], from the inventory and the files;
//!   each device's typed [`devices::Identity`];
//! - [`setup`]: the node-side setups ([`setup::NvidiaSetup`]: passthrough, time-slicing,
//!   dynamic MIG, MPS), which read the devices' identity.
//!
//! Layering: `driver_files` ← `nvml` ← `devices` ← `setup` (an arrow points at a part's
//! user); `nvml` does not need `driver_files` and `devices` does not need `setup`.

pub mod devices;
pub mod driver_files;
pub mod nvml;
pub mod setup;

#[cfg(test)]
mod tests;

pub use devices::{Built, NvidiaConfig, NvidiaDiscovery};

// compat: removed after the backend move. The module paths code outside discovery/nvidia
// used before the four parts; each names the part that now holds the items.

/// compat: removed after the backend move (now in [`nvml`]).
pub mod selection {
    pub use crate::discovery::nvidia::nvml::{GpuSelection, SelectionError};
}

/// compat: removed after the backend move (now in [`setup`]).
pub mod mps {
    pub use crate::discovery::nvidia::setup::{MpsManager, DEFAULT_WAIT};
}

/// compat: removed after the backend move (now in [`devices`] and [`setup`]).
pub mod dynamic_mig {
    pub use crate::discovery::nvidia::devices::{MigLedger, Placements};
    pub use crate::discovery::nvidia::setup::MigManager;
}

/// compat: removed after the backend move (now in [`devices`]).
pub mod hook_edits {
    pub use crate::discovery::nvidia::devices::{HookConfig, SUBCOMMAND};
}

/// compat: removed after the backend move (now in [`setup`]).
pub mod vfio {
    pub use crate::discovery::nvidia::setup::Vfio;

    /// compat: removed after the backend move (now in `setup`).
    pub mod persistence {
        pub use crate::discovery::nvidia::setup::{NvmlPersistence, PersistenceMode, Untouched};
    }
}

/// compat: removed after the backend move (now in [`driver_files`]).
pub mod capabilities {
    pub use crate::discovery::nvidia::driver_files::Capability;
}

/// compat: removed after the backend move (now in [`nvml`]).
pub mod mig_nvml {
    pub use crate::discovery::nvidia::nvml::gi_placement;
}

/// compat: removed after the backend move (now in [`driver_files`]).
pub mod ldcache {
    pub use crate::discovery::nvidia::driver_files::{
        parse_ldcache as parse, LdCacheEntry as Entry,
    };
}

/// compat: removed after the backend move (now in [`driver_files`]).
pub mod procfs {
    pub use crate::discovery::nvidia::driver_files::{
        capability_file, char_majors, mig_access_cap, mig_minors, read_char_majors, CapabilityFile,
    };
}
