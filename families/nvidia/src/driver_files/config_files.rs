//! The driver's files outside its library directories that a capability needs: the Vulkan,
//! EGL and OpenCL loaders' manifests, OptiX's cache, and the X server's modules. Each is
//! mounted at its own path; when it is a symlink (Debian's alternatives), the file it leads
//! to inside the driver root is the mount source.

use super::capabilities::Capability;
use super::files::DriverFile;
use super::in_root;
use super::roots::Roots;

/// `(capability, directory, file name glob)`; `{version}` in a glob is the driver version.
const PATTERNS: &[(Capability, &str, &str)] = &[
    // The OpenCL ICD names libnvidia-opencl, a compute library.
    (Capability::Compute, "/etc/OpenCL/vendors", "nvidia*.icd"),
    (
        Capability::Graphics,
        "/etc/vulkan/icd.d",
        "nvidia_icd*.json",
    ),
    (
        Capability::Graphics,
        "/usr/share/vulkan/icd.d",
        "nvidia_icd*.json",
    ),
    (
        Capability::Graphics,
        "/etc/vulkan/icd.d",
        "nvidia_layers.json",
    ),
    (
        Capability::Graphics,
        "/etc/vulkan/implicit_layer.d",
        "nvidia_layers.json",
    ),
    (
        Capability::Graphics,
        "/usr/share/vulkan/implicit_layer.d",
        "nvidia_layers.json",
    ),
    (
        Capability::Graphics,
        "/usr/share/glvnd/egl_vendor.d",
        "10_nvidia.json",
    ),
    (
        Capability::Graphics,
        "/usr/share/egl/egl_external_platform.d",
        "*nvidia*.json",
    ),
    (Capability::Graphics, "/usr/share/nvidia", "nvoptix.bin"),
    (
        Capability::Display,
        "/usr/lib/xorg/modules/drivers",
        "nvidia_drv.so",
    ),
    (
        Capability::Display,
        "/usr/lib64/xorg/modules/drivers",
        "nvidia_drv.so",
    ),
    (
        Capability::Display,
        "/usr/lib/xorg/modules/extensions",
        "libglxserver_nvidia.so.{version}",
    ),
    (
        Capability::Display,
        "/usr/lib64/xorg/modules/extensions",
        "libglxserver_nvidia.so.{version}",
    ),
    // Debian keeps both X modules with the driver's libraries.
    (
        Capability::Display,
        "/usr/lib/x86_64-linux-gnu/nvidia/xorg",
        "nvidia_drv.so",
    ),
    (
        Capability::Display,
        "/usr/lib/x86_64-linux-gnu/nvidia/xorg",
        "libglxserver_nvidia.so.{version}",
    ),
    (
        Capability::Display,
        "/usr/lib/aarch64-linux-gnu/nvidia/xorg",
        "nvidia_drv.so",
    ),
    (
        Capability::Display,
        "/usr/lib/aarch64-linux-gnu/nvidia/xorg",
        "libglxserver_nvidia.so.{version}",
    ),
];

/// The files of [`PATTERNS`] present under the driver root, in table order, each directory's
/// matches sorted by name.
pub fn find(roots: &Roots, version: &str) -> Vec<DriverFile> {
    let mut out: Vec<DriverFile> = Vec::new();
    for (capability, dir, glob) in PATTERNS {
        let glob = glob.replace("{version}", &glob::Pattern::escape(version));
        let Ok(pattern) = glob::Pattern::new(&glob) else {
            continue;
        };
        let Ok(entries) = std::fs::read_dir(roots.driver_visible(dir)) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| pattern.matches(n))
            .collect();
        names.sort();
        for name in names {
            let destination = format!("{dir}/{name}");
            let Ok(path) = in_root::resolve(roots, &destination) else {
                tracing::debug!(path = destination, "skipped: a link that does not resolve");
                continue;
            };
            if !roots.driver_visible(&path).is_file() || out.iter().any(|f| f.path == path) {
                continue;
            }
            out.push(DriverFile {
                capability: *capability,
                path,
                destination,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn manifests_and_x_modules_by_capability() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let put = |p: &str| {
            let p = r.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x").unwrap();
        };
        put("etc/vulkan/icd.d/nvidia_icd.json");
        put("etc/vulkan/icd.d/intel_icd.json");
        put("usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json");
        put("usr/share/egl/egl_external_platform.d/10_mesa.json");
        put("usr/share/nvidia/nvoptix.bin");
        put("usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.580.95.05");
        put("usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.570.86.10");
        put("usr/lib/nvidia/nvidia_drv.so");
        std::fs::create_dir_all(r.join("usr/lib/xorg/modules/drivers")).unwrap();
        symlink(
            "/usr/lib/nvidia/nvidia_drv.so",
            r.join("usr/lib/xorg/modules/drivers/nvidia_drv.so"),
        )
        .unwrap();
        let roots = Roots {
            host: r.to_path_buf(),
            driver: "/".into(),
        };
        let got: Vec<(Capability, String, String)> = find(&roots, "580.95.05")
            .into_iter()
            .map(|f| (f.capability, f.path, f.destination))
            .collect();
        let same = |c, p: &str| (c, p.to_string(), p.to_string());
        assert_eq!(
            got,
            [
                same(Capability::Graphics, "/etc/vulkan/icd.d/nvidia_icd.json"),
                same(
                    Capability::Graphics,
                    "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json"
                ),
                same(Capability::Graphics, "/usr/share/nvidia/nvoptix.bin"),
                (
                    Capability::Display,
                    "/usr/lib/nvidia/nvidia_drv.so".to_string(),
                    "/usr/lib/xorg/modules/drivers/nvidia_drv.so".to_string()
                ),
                same(
                    Capability::Display,
                    "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.580.95.05"
                ),
            ]
        );
    }
}
