//! Links the fake libcuda like the real one: SONAME `libcuda.so.1` (so that a copy loaded
//! by full path satisfies a later `dlopen("libcuda.so.1")`, as NVML does), and the same
//! glibc libraries the real driver libraries need (see ../fake-nvml/build.rs for why they
//! are named by file).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
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
