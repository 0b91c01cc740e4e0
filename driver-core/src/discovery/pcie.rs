//! Where a device sits on the PCI tree, as DeviceClass selectors match on it.

use std::path::Path;

/// The `pci<domain>:<bus>` root of the PCI device behind a sysfs device link, if any:
/// the first path component under `<sysfs>/devices` of the resolved link.
pub fn pcie_root(sysfs: &Path, device_link: &Path) -> Option<String> {
    let resolved = std::fs::canonicalize(device_link).ok()?;
    let devices = std::fs::canonicalize(sysfs.join("devices")).ok()?;
    let rest = resolved.strip_prefix(&devices).ok()?;
    let first = rest.components().next()?.as_os_str().to_str()?;
    first.starts_with("pci").then(|| first.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcie_root_from_a_sysfs_tree() {
        let sys = tempfile::tempdir().unwrap();
        let dev = sys
            .path()
            .join("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/tty/ttyUSB0");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::create_dir_all(sys.path().join("devices/virtual/misc/fuse")).unwrap();
        std::fs::create_dir_all(sys.path().join("dev/char")).unwrap();
        std::os::unix::fs::symlink(&dev, sys.path().join("dev/char/188:0")).unwrap();
        std::os::unix::fs::symlink(
            sys.path().join("devices/virtual/misc/fuse"),
            sys.path().join("dev/char/10:229"),
        )
        .unwrap();
        let root = |link: &str| pcie_root(sys.path(), &sys.path().join(link));
        assert_eq!(root("dev/char/188:0").as_deref(), Some("pci0000:3a"));
        assert_eq!(root("dev/char/10:229"), None);
        assert_eq!(root("dev/char/1:3"), None);
    }
}
