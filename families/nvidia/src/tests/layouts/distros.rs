//! Distribution packages and the runfile installer.

use super::*;

#[test]
fn debian_and_ubuntu_packages() {
    let n = Node::new("");
    let lib = "/usr/lib/x86_64-linux-gnu";
    n.libs(lib);
    n.bins("/usr/bin");
    n.firmware("/lib/firmware");
    n.socket("/run/nvidia-persistenced/socket");
    n.file("/usr/share/vulkan/icd.d/nvidia_icd.json");
    n.file("/usr/share/glvnd/egl_vendor.d/10_nvidia.json");
    n.file("/etc/OpenCL/vendors/nvidia.icd");
    n.file("/usr/lib/xorg/modules/drivers/nvidia_drv.so");
    let ext = "/usr/lib/xorg/modules/extensions";
    n.file(&format!("{ext}/libglxserver_nvidia.so.{V}"));
    n.link(
        &format!("{ext}/libglxserver_nvidia.so"),
        &format!("libglxserver_nvidia.so.{V}"),
    );
    let s = n.scan();

    // Spelled out once; the other layouts use the helpers.
    let want = owned(&[
        (
            "/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05",
            "/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05",
        ),
        (
            "/usr/lib/x86_64-linux-gnu/libnvidia-future.so.580.95.05",
            "/usr/lib/x86_64-linux-gnu/libnvidia-future.so.580.95.05",
        ),
        (
            "/usr/lib/x86_64-linux-gnu/libnvidia-gpucomp.so.580.95.05",
            "/usr/lib/x86_64-linux-gnu/libnvidia-gpucomp.so.580.95.05",
        ),
        (
            "/usr/lib/x86_64-linux-gnu/libnvidia-nvvm.so.580.95.05",
            "/usr/lib/x86_64-linux-gnu/libnvidia-nvvm.so.580.95.05",
        ),
        (
            "/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.580.95.05",
            "/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.580.95.05",
        ),
        (
            "/usr/bin/nvidia-cuda-mps-control",
            "/usr/bin/nvidia-cuda-mps-control",
        ),
        (
            "/usr/bin/nvidia-cuda-mps-server",
            "/usr/bin/nvidia-cuda-mps-server",
        ),
        (
            "/etc/OpenCL/vendors/nvidia.icd",
            "/etc/OpenCL/vendors/nvidia.icd",
        ),
        (
            "/usr/lib/x86_64-linux-gnu/libnvidia-cfg.so.580.95.05",
            "/usr/lib/x86_64-linux-gnu/libnvidia-cfg.so.580.95.05",
        ),
        (
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05",
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05",
        ),
        ("/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi"),
        ("/usr/bin/nvidia-debugdump", "/usr/bin/nvidia-debugdump"),
        (
            "/usr/bin/nvidia-persistenced",
            "/usr/bin/nvidia-persistenced",
        ),
        (
            "/lib/firmware/nvidia/580.95.05/gsp_ga10x.bin",
            "/lib/firmware/nvidia/580.95.05/gsp_ga10x.bin",
        ),
        (
            "/lib/firmware/nvidia/580.95.05/gsp_tu10x.bin",
            "/lib/firmware/nvidia/580.95.05/gsp_tu10x.bin",
        ),
        (
            "/run/nvidia-persistenced/socket",
            "/run/nvidia-persistenced/socket",
        ),
    ]);
    assert_eq!(s.default, want);
    let mut graphics = libs("", lib, Capability::Graphics);
    graphics.extend(in_place(
        "",
        "/usr/share/vulkan/icd.d",
        &["nvidia_icd.json"],
    ));
    graphics.extend(in_place(
        "",
        "/usr/share/glvnd/egl_vendor.d",
        &["10_nvidia.json"],
    ));
    let display = owned(&[
        (
            "/usr/lib/xorg/modules/drivers/nvidia_drv.so",
            "/usr/lib/xorg/modules/drivers/nvidia_drv.so",
        ),
        (
            "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.580.95.05",
            "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.580.95.05",
        ),
    ]);
    assert_eq!(
        s.optional,
        BTreeMap::from([
            ("display".to_string(), display),
            ("graphics".to_string(), graphics),
            ("video".to_string(), libs("", lib, Capability::Video)),
        ])
    );
    // The links: every GPU container's, and those each optional capability needs.
    assert_eq!(s.files.lib_dirs, [lib]);
    assert_eq!(
        s.files.symlinks,
        owned(&[
            ("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so"),
            (
                "libcuda.so.580.95.05",
                "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
            ),
            (
                "libnvidia-ml.so.580.95.05",
                "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
            ),
        ])
    );
    assert_eq!(
        s.files.optional_symlinks,
        BTreeMap::from([
            (
                Capability::Graphics,
                owned(&[(
                    "libGLX_nvidia.so.580.95.05",
                    "/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.0"
                )])
            ),
            (
                Capability::Video,
                owned(&[(
                    "libvdpau_nvidia.so.580.95.05",
                    "/usr/lib/x86_64-linux-gnu/vdpau/libvdpau_nvidia.so.1"
                )])
            ),
            (
                Capability::Display,
                owned(&[(
                    "libglxserver_nvidia.so.580.95.05",
                    "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so"
                )])
            ),
        ])
    );
    assert!(mounts_outside(&n.roots(), &s.files, &[]).is_empty());
}

#[test]
fn rhel_and_fedora_packages() {
    let n = Node::new("");
    n.libs("/usr/lib64");
    n.bins("/usr/bin");
    // Firmware only under /usr/lib/firmware; both sockets.
    n.firmware("/usr/lib/firmware");
    n.socket("/run/nvidia-persistenced/socket");
    n.socket("/run/nvidia-fabricmanager/socket");
    n.file("/usr/share/vulkan/icd.d/nvidia_icd.x86_64.json");
    n.file("/usr/lib64/xorg/modules/drivers/nvidia_drv.so");
    n.file(&format!(
        "/usr/lib64/xorg/modules/extensions/libglxserver_nvidia.so.{V}"
    ));
    let s = n.scan();
    let sockets = [
        "/run/nvidia-persistenced/socket",
        "/run/nvidia-fabricmanager/socket",
    ];
    assert_eq!(
        s.default,
        default_mounts("", "/usr/lib64", "/usr/bin", "/usr/lib/firmware", &sockets)
    );
    let mut graphics = libs("", "/usr/lib64", Capability::Graphics);
    graphics.extend(in_place(
        "",
        "/usr/share/vulkan/icd.d",
        &["nvidia_icd.x86_64.json"],
    ));
    assert_eq!(s.optional["graphics"], graphics);
    assert_eq!(
        s.optional["video"],
        libs("", "/usr/lib64", Capability::Video)
    );
    assert_eq!(
        s.optional["display"],
        in_place(
            "",
            "/usr/lib64/xorg/modules",
            &[
                "drivers/nvidia_drv.so".to_string(),
                format!("extensions/libglxserver_nvidia.so.{V}"),
            ]
        )
    );
    assert_eq!(s.files.lib_dirs, ["/usr/lib64"]);
}

#[test]
fn the_runfile_installer() {
    let n = Node::new("");
    let lib = "/usr/lib/x86_64-linux-gnu";
    n.libs(lib);
    n.bins("/usr/bin");
    n.firmware("/lib/firmware");
    n.file("/etc/vulkan/icd.d/nvidia_icd.json");
    n.file("/etc/vulkan/implicit_layer.d/nvidia_layers.json");
    n.file("/usr/share/glvnd/egl_vendor.d/10_nvidia.json");
    n.file("/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json");
    n.file("/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json");
    n.file("/usr/share/nvidia/nvoptix.bin");
    let s = n.scan();
    assert_eq!(
        s.default,
        default_mounts("", lib, "/usr/bin", "/lib/firmware", &[])
    );
    let mut graphics = libs("", lib, Capability::Graphics);
    for (dir, name) in [
        ("/etc/vulkan/icd.d", "nvidia_icd.json"),
        ("/etc/vulkan/implicit_layer.d", "nvidia_layers.json"),
        ("/usr/share/glvnd/egl_vendor.d", "10_nvidia.json"),
        (
            "/usr/share/egl/egl_external_platform.d",
            "10_nvidia_wayland.json",
        ),
        (
            "/usr/share/egl/egl_external_platform.d",
            "15_nvidia_gbm.json",
        ),
        ("/usr/share/nvidia", "nvoptix.bin"),
    ] {
        graphics.extend(in_place("", dir, &[name]));
    }
    assert_eq!(s.optional["graphics"], graphics);
    assert!(!s.optional.contains_key("display"));
}
