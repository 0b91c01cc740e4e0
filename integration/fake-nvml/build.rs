//! Links the fake NVML against the same libraries the real `libnvidia-ml.so.1` needs, so
//! that an image or a container lacking them fails in CI as it does on a GPU node.
//!
//! glibc 2.34+ folds libpthread, libdl and librt into libc and ships no `libpthread.so`
//! link-time names for them, so `-lpthread` would pick the empty static archive and add
//! nothing: name the runtime files exactly, and keep them with `--no-as-needed`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-as-needed");
    for lib in [
        "libpthread.so.0",
        "libdl.so.2",
        "libm.so.6",
        "librt.so.1",
        "libc.so.6",
    ] {
        println!("cargo:rustc-cdylib-link-arg=-l:{lib}");
    }
}
