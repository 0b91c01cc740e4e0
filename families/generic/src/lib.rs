//! graft-driver's vendor-neutral families, each a folder with its discovery and its
//! [`graft_driver_core::backend::Backend`]:
//!
//! - [`char`]: device nodes the devices config lists (fuse, tun, kvm, any node in /dev);
//! - [`files`]: entries of the directories the devices config serves;
//! - [`render`]: DRM render nodes (`/dev/dri/renderD<N>`).
//!
//! None has node-side work: a device is a node or a mount, with no setup to record in the
//! checkpoint and no opaque configuration of its own.

pub mod char;
pub mod files;
pub mod render;
