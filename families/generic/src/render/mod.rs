//! The `render` family: the node's DRM render nodes (`/dev/dri/renderD<N>`), one device
//! each, for GPU compute and video work that needs no display (Intel, AMD, virtio GPUs).
//! The kernel's modesetting nodes (`card<N>`) are never offered.
//!
//! Each device carries `type: render`, its node's `path`, `major` and `minor`, and what
//! sysfs says of the GPU behind it: `vendorID` and `deviceID` (`0x8086`), `driver`
//! (`i915`, `amdgpu`), `pciBusID` and `resource.kubernetes.io/pcieRoot`. The
//! `render.graft.dev` DeviceClass selects them. Nothing is configured, and nothing is done
//! on the node at prepare: the container gets the node, and only the containers that
//! reference the claim.

pub mod backend;
mod scan;

pub use scan::{RenderDiscovery, TYPE};
