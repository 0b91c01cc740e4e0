//! disable-device-node-modification: with `ModifyDeviceFiles: 1`, libnvidia-ml and
//! nvidia-smi would try to create or chmod device nodes inside the container. A copy of the
//! driver's params with 0 is bind-mounted read-only over the container's
//! `/proc/driver/nvidia/params`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{bail, Context};

/// The params text with modification off, or `None` when it already is.
pub fn rewrite(params: &str) -> Option<String> {
    let mut changed = false;
    let out: Vec<String> = params
        .lines()
        .map(|l| match l.split_once(':') {
            Some((k, v)) if k.trim() == "ModifyDeviceFiles" && v.trim() != "0" => {
                changed = true;
                format!("{k}: 0")
            }
            _ => l.to_string(),
        })
        .collect();
    changed.then(|| out.join("\n") + "\n")
}

pub fn disable_modification(rootfs: &Path, host_params: &Path, copy: &Path) -> anyhow::Result<()> {
    let Ok(params) = std::fs::read_to_string(host_params) else {
        // No NVIDIA driver loaded here: nothing to hide.
        return Ok(());
    };
    let Some(text) = rewrite(&params) else {
        return Ok(());
    };
    let target = rootfs.join("proc/driver/nvidia/params");
    if !target.exists() {
        return Ok(());
    }
    if let Some(dir) = copy.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // Written aside and renamed: other containers may be bind-mounting the current copy.
    let tmp = copy.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, text).with_context(|| format!("{}", tmp.display()))?;
    std::fs::rename(&tmp, copy).with_context(|| format!("{}", copy.display()))?;
    bind_read_only(copy, &target)
}

fn bind_read_only(source: &Path, target: &Path) -> anyhow::Result<()> {
    let src = CString::new(source.as_os_str().as_bytes())?;
    let dst = CString::new(target.as_os_str().as_bytes())?;
    // SAFETY: valid NUL-terminated paths; null fstype and data are allowed for binds.
    let rc = unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        bail!(
            "bind-mounting {} over {}: {}",
            source.display(),
            target.display(),
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: as above; remounting the new bind read-only.
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            dst.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        bail!(
            "making {} read-only: {}",
            target.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_modify_device_files_changes() {
        let p = "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n";
        assert_eq!(
            rewrite(p).unwrap(),
            "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 0\nDeviceFileUID: 0\n"
        );
        assert_eq!(rewrite("ModifyDeviceFiles: 0\n"), None);
        assert_eq!(rewrite(""), None);
    }

    #[test]
    fn nothing_to_do_without_a_driver() {
        let root = tempfile::tempdir().unwrap();
        disable_modification(
            root.path(),
            Path::new("/nonexistent/params"),
            &root.path().join("copy"),
        )
        .unwrap();
        assert!(!root.path().join("copy").exists());
    }
}
