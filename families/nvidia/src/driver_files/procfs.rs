//! What the NVIDIA kernel modules publish under /proc: dynamic character-device majors
//! (`/proc/devices`) and the minors of MIG capability nodes (`mig-minors` and the
//! per-capability files).

use std::collections::BTreeMap;
use std::path::Path;

use graft_driver_core::error::{DriverError, Result};

/// Character-device majors by driver name, from the `Character devices:` section only: a
/// block device of the same name must not match.
pub fn char_majors(text: &str) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    let mut in_char = false;
    for line in text.lines() {
        let line = line.trim();
        if line.ends_with(':') {
            in_char = line == "Character devices:";
            continue;
        }
        if !in_char {
            continue;
        }
        let mut parts = line.split_whitespace();
        if let (Some(major), Some(name), None) = (parts.next(), parts.next(), parts.next()) {
            if let Ok(major) = major.parse() {
                out.insert(name.to_string(), major);
            }
        }
    }
    out
}

/// Reads `<proc>/devices`.
pub fn read_char_majors(proc_root: &Path) -> Result<BTreeMap<String, u32>> {
    let path = proc_root.join("devices");
    let text = std::fs::read_to_string(&path).map_err(|e| DriverError::io("read", &path, e))?;
    Ok(char_majors(&text))
}

/// `/proc/driver/nvidia-caps/mig-minors`: capability name (`gpu<minor>/gi<g>/ci<c>/access`,
/// `config`, `monitor`) to device minor.
pub fn mig_minors(text: &str) -> BTreeMap<String, u32> {
    text.lines()
        .filter_map(|l| {
            let (name, minor) = l.trim().split_once(' ')?;
            Some((name.to_string(), minor.trim().parse().ok()?))
        })
        .collect()
}

/// A capability file such as `capabilities/gpu2/mig/gi1/access`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapabilityFile {
    /// The node's minor under the nvidia-caps major.
    pub minor: u32,
    /// Permission bits; the file gives them in decimal.
    pub mode: u32,
}

/// A capability file's `DeviceFileMinor` and `DeviceFileMode`; `None` without a minor.
pub fn capability_file(text: &str) -> Option<CapabilityFile> {
    let mut minor = None;
    let mut mode = None;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        match k.trim() {
            "DeviceFileMinor" => minor = v.trim().parse().ok(),
            "DeviceFileMode" => mode = v.trim().parse().ok(),
            _ => {}
        }
    }
    Some(CapabilityFile {
        minor: minor?,
        mode: mode.unwrap_or(0o444),
    })
}

/// The access capability of a GPU instance (`ci == None`) or compute instance, looked up by
/// the parent's minor number: the capability file first (it exists while the instance
/// does), then `mig-minors` with a read-only mode.
pub fn mig_access_cap(
    proc_root: &Path,
    parent_minor: u32,
    gi: u32,
    ci: Option<u32>,
) -> Result<CapabilityFile> {
    let caps = proc_root.join("driver/nvidia/capabilities");
    let (file, key) = match ci {
        None => (
            caps.join(format!("gpu{parent_minor}/mig/gi{gi}/access")),
            format!("gpu{parent_minor}/gi{gi}/access"),
        ),
        Some(ci) => (
            caps.join(format!("gpu{parent_minor}/mig/gi{gi}/ci{ci}/access")),
            format!("gpu{parent_minor}/gi{gi}/ci{ci}/access"),
        ),
    };
    if let Ok(text) = std::fs::read_to_string(&file) {
        return capability_file(&text).ok_or_else(|| DriverError::Discovery {
            backend: "nvidia",
            reason: format!("{}: no DeviceFileMinor line", file.display()),
        });
    }
    let minors_path = proc_root.join("driver/nvidia-caps/mig-minors");
    let text = std::fs::read_to_string(&minors_path)
        .map_err(|e| DriverError::io("read", &minors_path, e))?;
    let minor = mig_minors(&text)
        .get(&key)
        .copied()
        .ok_or_else(|| DriverError::Discovery {
            backend: "nvidia",
            reason: format!(
                "{key} is in neither {} nor {}",
                file.display(),
                minors_path.display()
            ),
        })?;
    Ok(CapabilityFile { minor, mode: 0o444 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majors_come_from_the_character_section_by_exact_name() {
        let text = "Character devices:\n  1 mem\n195 nvidia\n234 nvidia-caps-imex-channels\n\
                    235 nvidia-caps\n510 nvidia-uvm\n\nBlock devices:\n  8 sd\n 511 nvidia-uvm\n";
        let m = char_majors(text);
        assert_eq!(m["nvidia-caps"], 235);
        assert_eq!(m["nvidia-caps-imex-channels"], 234);
        assert_eq!(m["nvidia-uvm"], 510);
        assert_eq!(m["nvidia"], 195);
        assert!(!m.contains_key("sd"));
    }

    #[test]
    fn mig_minors_and_capability_files() {
        let m = mig_minors("config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\n");
        assert_eq!(m["gpu0/gi0/ci0/access"], 4);
        assert_eq!(m["config"], 1);
        let c = capability_file("DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n")
            .unwrap();
        assert_eq!(
            c,
            CapabilityFile {
                minor: 1,
                mode: 0o400
            }
        );
        assert_eq!(capability_file("DeviceFileMode: 256\n"), None);
    }

    #[test]
    fn access_caps_prefer_the_capability_file_and_key_by_minor() {
        let proc = tempfile::tempdir().unwrap();
        let caps = proc.path().join("driver/nvidia/capabilities/gpu4/mig/gi1");
        std::fs::create_dir_all(&caps).unwrap();
        std::fs::write(
            caps.join("access"),
            "DeviceFileMinor: 57\nDeviceFileMode: 292\n",
        )
        .unwrap();
        std::fs::create_dir_all(proc.path().join("driver/nvidia-caps")).unwrap();
        std::fs::write(
            proc.path().join("driver/nvidia-caps/mig-minors"),
            "gpu4/gi1/access 99\ngpu4/gi1/ci0/access 58\n",
        )
        .unwrap();
        let gi = mig_access_cap(proc.path(), 4, 1, None).unwrap();
        assert_eq!(
            gi,
            CapabilityFile {
                minor: 57,
                mode: 0o444
            }
        );
        let ci = mig_access_cap(proc.path(), 4, 1, Some(0)).unwrap();
        assert_eq!(ci.minor, 58);
        let err = mig_access_cap(proc.path(), 6, 1, Some(0))
            .unwrap_err()
            .to_string();
        assert!(err.contains("gpu6/gi1/ci0/access"), "{err}");
    }
}
