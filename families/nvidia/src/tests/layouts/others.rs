//! A driver container, GKE/COS, arm64, and binaries and libraries in unusual places.

use super::*;

#[test]
fn a_driver_container() {
    let n = Node::new("/run/nvidia/driver");
    let lib = "/usr/lib/x86_64-linux-gnu";
    n.libs(lib);
    n.bins("/usr/bin");
    n.firmware("/lib/firmware");
    n.socket("/run/nvidia-persistenced/socket");
    n.file("/etc/vulkan/icd.d/nvidia_icd.json");
    // The host's own nvidia-smi, of another version, is not the driver root's.
    write_exe(&n.host.path().join("usr/bin/nvidia-smi"), &driver_elf(OLD));
    let s = n.scan();
    let src = "/run/nvidia/driver";
    assert_eq!(
        s.default,
        default_mounts(
            src,
            lib,
            "/usr/bin",
            "/lib/firmware",
            &["/run/nvidia-persistenced/socket"]
        )
    );
    let mut graphics = libs(src, lib, Capability::Graphics);
    graphics.extend(in_place(src, "/etc/vulkan/icd.d", &["nvidia_icd.json"]));
    assert_eq!(s.optional["graphics"], graphics);
    assert_eq!(s.optional["video"], libs(src, lib, Capability::Video));
    // Links and library directories as the container sees them.
    assert_eq!(s.files.lib_dirs, [lib]);
    assert!(s.files.symlinks.iter().all(|(_, l)| l.starts_with(lib)));
}

#[test]
fn gke_and_cos_with_a_wrapper_script() {
    let n = Node::new("");
    let lib = "/usr/local/nvidia/lib64";
    n.libs(lib);
    n.bins("/usr/local/nvidia/bin");
    // GKE's /usr/bin/nvidia-smi: what graft mounted before, and nvidia-smi failed.
    let wrapper = b"#!/bin/bash\n\
        export LD_LIBRARY_PATH=/usr/local/nvidia/lib64\n\
        exec /usr/local/nvidia/bin/nvidia-smi \"$@\"\n";
    write_exe(&n.at("/usr/bin/nvidia-smi"), wrapper);
    n.socket("/run/nvidia-persistenced/socket");
    // Only the linker's cache knows the library directory.
    n.ld_so_cache(&[
        (
            native_ldcache(),
            "libcuda.so.1",
            "/usr/local/nvidia/lib64/libcuda.so.1",
        ),
        (
            native_ldcache(),
            "libnvidia-ml.so.1",
            "/usr/local/nvidia/lib64/libnvidia-ml.so.1",
        ),
    ]);
    let s = n.scan();
    assert!(matches!(
        check_executable(&n.at("/usr/bin/nvidia-smi"), V),
        Err(Rejected::NotElf)
    ));
    assert_eq!(s.files.lib_dirs, [lib]);
    assert_eq!(
        s.default,
        default_mounts(
            "",
            lib,
            "/usr/local/nvidia/bin",
            "",
            &["/run/nvidia-persistenced/socket"]
        )
    );
    assert_eq!(
        s.files.binary("nvidia-smi").map(|b| b.path.as_str()),
        Some("/usr/local/nvidia/bin/nvidia-smi")
    );
    // /usr/local/nvidia is one of the policy's roots.
    assert!(mounts_outside(&n.roots(), &s.files, &[]).is_empty());
}

#[test]
fn aarch64_library_paths() {
    let n = Node::new("");
    let lib = "/usr/lib/aarch64-linux-gnu";
    n.libs(lib);
    n.bins("/usr/bin");
    n.firmware("/lib/firmware");
    // An arm64 node's cache: on an x86-64 test machine its entries are another machine's
    // and skipped; the fixed directory finds the libraries either way, once.
    n.ld_so_cache(&[(AARCH64, "libcuda.so.1", &format!("{lib}/libcuda.so.1"))]);
    let s = n.scan();
    assert_eq!(s.files.lib_dirs, [lib]);
    assert_eq!(
        s.default,
        default_mounts("", lib, "/usr/bin", "/lib/firmware", &[])
    );
    assert_eq!(s.optional["video"], libs("", lib, Capability::Video));
}

#[test]
fn a_stale_binary_beside_the_libraries_and_a_directory_outside_the_policy() {
    let n = Node::new("");
    let lib = "/opt/nvidia/lib64";
    n.libs(lib);
    // /opt/nvidia/bin, searched first, holds the previous driver's binaries.
    for b in [UTILITY_BINS, COMPUTE_BINS].concat() {
        n.exe(&format!("/opt/nvidia/bin/{b}"), OLD);
    }
    n.bins("/usr/bin");
    n.ld_so_cache(&[(
        native_ldcache(),
        "libnvidia-ml.so.1",
        "/opt/nvidia/lib64/libnvidia-ml.so.1",
    )]);
    let s = n.scan();
    assert_eq!(s.default, default_mounts("", lib, "/usr/bin", "", &[]));
    // GPU claims will be refused until the operator allows /opt/nvidia/lib64.
    let outside = mounts_outside(&n.roots(), &s.files, &[]);
    assert_eq!(
        outside,
        BTreeMap::from([(
            lib.to_string(),
            [
                Capability::Compute,
                Capability::Utility,
                Capability::Graphics,
                Capability::Video
            ]
            .into()
        )])
    );
    assert!(mounts_outside(&n.roots(), &s.files, &["/opt/nvidia".into()]).is_empty());
}
