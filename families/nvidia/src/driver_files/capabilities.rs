//! The NVIDIA driver capabilities (as in `NVIDIA_DRIVER_CAPABILITIES`): which of the
//! driver's files a container gets. Every GPU container gets `compute` and `utility`; the
//! others are asked for by name in the claim's configuration.
//!
//! The buckets follow libnvidia-container's `src/nvc_info.c`. A driver library this table
//! does not know goes to `compute`: a library that a new CUDA release adds is then mounted
//! by default rather than silently missing, and an unneeded library costs a bind mount.

use std::fmt;
use std::str::FromStr;

/// One capability. Ordered, so that maps keyed by it are stable.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Capability {
    /// CUDA and OpenCL.
    Compute,
    /// nvidia-smi and NVML.
    Utility,
    /// OpenGL, Vulkan, EGL.
    Graphics,
    /// NVENC and NVDEC.
    Video,
    /// The X server modules.
    Display,
}

impl Capability {
    /// Every capability, in order.
    pub const ALL: [Capability; 5] = [
        Capability::Compute,
        Capability::Utility,
        Capability::Graphics,
        Capability::Video,
        Capability::Display,
    ];
    /// What every GPU or MIG device's `edits` carry.
    pub const DEFAULT: [Capability; 2] = [Capability::Compute, Capability::Utility];
    /// What a device's `optional_edits` may carry, keyed by [`Capability::name`].
    pub const OPTIONAL: [Capability; 3] =
        [Capability::Graphics, Capability::Video, Capability::Display];

    /// As in `NVIDIA_DRIVER_CAPABILITIES`: `compute`, `graphics`, ...
    pub fn name(self) -> &'static str {
        match self {
            Capability::Compute => "compute",
            Capability::Utility => "utility",
            Capability::Graphics => "graphics",
            Capability::Video => "video",
            Capability::Display => "display",
        }
    }

    /// Whether every GPU container gets it.
    pub fn is_default(self) -> bool {
        Capability::DEFAULT.contains(&self)
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown NVIDIA driver capability {0:?} (known: compute, utility, graphics, video, display)"
)]
/// A capability name graft does not know.
pub struct UnknownCapability(pub String);

impl FromStr for Capability {
    type Err = UnknownCapability;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Capability::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| UnknownCapability(s.to_string()))
    }
}

const UTILITY_LIBS: &[&str] = &["libnvidia-ml", "libnvidia-cfg", "libnvidia-nscq"];
const VIDEO_LIBS: &[&str] = &[
    "libvdpau_nvidia",
    "libnvidia-encode",
    "libnvcuvid",
    "libnvidia-opticalflow",
];
const GRAPHICS_LIBS: &[&str] = &[
    "libnvidia-eglcore",
    "libnvidia-glcore",
    "libnvidia-tls",
    "libnvidia-glsi",
    "libnvidia-fbc",
    "libnvidia-ifr",
    "libnvidia-rtcore",
    "libnvoptix",
    "libGLX_nvidia",
    "libEGL_nvidia",
    "libGLESv2_nvidia",
    "libGLESv1_CM_nvidia",
    "libnvidia-glvkspirv",
    "libnvidia-cbl",
    "libnvidia-vulkan-producer",
    "libnvidia-present",
    "libnvidia-vksc-core",
    "libnvidia-wayland-client",
    "libnvidia-api",
    // NGX (DLSS) has its own bucket in libnvidia-container; it serves rendering.
    "libnvidia-ngx",
];
/// The EGL platform libraries (gbm, wayland, wayland2, xcb, xlib), versioned on their own.
pub const EGL_PLATFORM_PREFIX: &str = "libnvidia-egl-";
/// The legacy NVVM library, versioned on its own (`libnvidia-nvvm70.so.4`).
pub const LEGACY_NVVM_PREFIX: &str = "libnvidia-nvvm70.so.";
const DISPLAY_LIBS: &[&str] = &[
    "libglxserver_nvidia",
    // nvidia-settings' user interface: only of use with an X server.
    "libnvidia-gtk2",
    "libnvidia-gtk3",
];

/// The capability of a driver library, by file name (`libcuda.so.580.95.05`).
pub fn of_library(file_name: &str) -> Capability {
    let stem = file_name.split(".so").next().unwrap_or(file_name);
    let is = |list: &[&str]| list.contains(&stem);
    if is(UTILITY_LIBS) {
        Capability::Utility
    } else if is(VIDEO_LIBS) {
        Capability::Video
    } else if is(GRAPHICS_LIBS) || file_name.starts_with(EGL_PLATFORM_PREFIX) {
        Capability::Graphics
    } else if is(DISPLAY_LIBS) {
        Capability::Display
    } else {
        // libcuda, libcudadebugger, libnvidia-opencl, -gpucomp, -ptxjitcompiler,
        // -fatbinaryloader, -allocator, -compiler, -pkcs11*, -nvvm, -tileiras, and any
        // library this table does not know (see the module's comment).
        Capability::Compute
    }
}

/// The capability of a driver binary, by name.
pub fn of_binary(name: &str) -> Capability {
    match name {
        "nvidia-smi" | "nvidia-debugdump" | "nvidia-persistenced" | "nv-fabricmanager" => {
            Capability::Utility
        }
        // nvidia-cuda-mps-control, -server, nvidia-imex, -ctl.
        _ => Capability::Compute,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names [`Capability::from_str`] accepts.
    const NAMES: [&str; 5] = ["compute", "utility", "graphics", "video", "display"];

    #[test]
    fn names_round_trip() {
        for (c, n) in Capability::ALL.into_iter().zip(NAMES) {
            assert_eq!(c.name(), n);
            assert_eq!(n.parse::<Capability>(), Ok(c));
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{n}\""));
        }
        let err = "compat32".parse::<Capability>().unwrap_err().to_string();
        assert!(
            err.contains("compat32") && err.contains("graphics"),
            "{err}"
        );
    }

    #[test]
    fn libraries_by_bucket() {
        let v = "580.95.05";
        for (lib, want) in [
            ("libcuda", Capability::Compute),
            ("libnvidia-ptxjitcompiler", Capability::Compute),
            ("libnvidia-pkcs11-openssl3", Capability::Compute),
            ("libnvidia-tileiras", Capability::Compute),
            ("libnvidia-ml", Capability::Utility),
            ("libnvidia-nscq", Capability::Utility),
            ("libnvcuvid", Capability::Video),
            ("libvdpau_nvidia", Capability::Video),
            ("libGLX_nvidia", Capability::Graphics),
            ("libnvidia-eglcore", Capability::Graphics),
            ("libnvidia-vulkan-producer", Capability::Graphics),
            ("libglxserver_nvidia", Capability::Display),
            ("libnvidia-something-new", Capability::Compute),
        ] {
            assert_eq!(of_library(&format!("{lib}.so.{v}")), want, "{lib}");
        }
        assert_eq!(
            of_library("libnvidia-egl-wayland.so.1.1.13"),
            Capability::Graphics
        );
        assert_eq!(of_library("libnvidia-nvvm70.so.4"), Capability::Compute);
    }

    #[test]
    fn binaries_by_bucket() {
        assert_eq!(of_binary("nvidia-smi"), Capability::Utility);
        assert_eq!(of_binary("nvidia-persistenced"), Capability::Utility);
        assert_eq!(of_binary("nvidia-cuda-mps-server"), Capability::Compute);
        assert_eq!(of_binary("nvidia-imex"), Capability::Compute);
    }
}
