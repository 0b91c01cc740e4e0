//! Driver-file lookup: the NVIDIA driver's user-space files on this node (libraries of the
//! running version, binaries, loader manifests and X modules, GSP firmware, IPC sockets),
//! each with the driver capability it belongs to, found under the driver root the way the
//! dynamic linker would find them; and what `/proc` says about the driver's device nodes.
//!
//! A library of its own: it imports nothing from the NVML inventory, the device assembly
//! or the setups. [`Roots`] turns a path inside the driver root into the host path a mount
//! needs and the path this process can read.

mod binaries;
mod capabilities;
mod config_files;
mod elf;
mod files;
mod find;
mod in_root;
mod ldcache;
mod libraries;
mod mount_roots;
mod nvml_lib;
mod procfs;
mod roots;

pub use capabilities::{Capability, UnknownCapability};
pub use files::{DriverFile, DriverFiles};
pub use find::find;
pub use ldcache::{parse as parse_ldcache, Entry as LdCacheEntry};
pub use mount_roots::{extra_roots_from_env, warn_outside, ALLOWED_ROOTS_ENV};
pub use nvml_lib::nvml_library;
pub use procfs::{
    capability_file, char_majors, mig_access_cap, mig_minors, read_char_majors, CapabilityFile,
};
pub use roots::Roots;

/// For the driver-layout tests, which check lookup and mounts together.
#[cfg(test)]
pub mod testing {
    pub use crate::driver_files::elf::tests::{driver_elf, write_exe};
    pub use crate::driver_files::elf::{check_executable, Rejected};
    pub use crate::driver_files::ldcache::tests::{
        build as build_ldcache, native as native_ldcache,
    };
    pub use crate::driver_files::mount_roots::outside;
}
