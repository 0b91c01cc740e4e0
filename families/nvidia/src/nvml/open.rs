//! The one place graft loads NVML: from an explicit path (the driver root's
//! libnvidia-ml.so.1 as this process sees it), never by the loader's search.

use std::ffi::OsStr;
use std::path::Path;

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

/// Loads and initialises NVML from `lib`. Dropping the handle shuts NVML down again.
pub fn open(lib: &Path) -> Result<Nvml, NvmlError> {
    Nvml::builder().lib_path(OsStr::new(lib.as_os_str())).init()
}

/// Loads `path` (a library) so that a later load by its soname finds it; `None`, logged,
/// when it cannot be loaded.
pub fn preload(path: &Path) -> Option<libloading::os::unix::Library> {
    // SAFETY: loading the driver's own libcuda runs only its initialisers, as NVML's own
    // load of it would; no symbol is called through this handle.
    match unsafe {
        libloading::os::unix::Library::open(
            Some(path),
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL,
        )
    } {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot load libcuda for NVML");
            None
        }
    }
}
