//! Checks a record before it is written and again before it is applied: a record that asks
//! for something unsafe or malformed is refused as a whole, never half-applied.

use std::collections::HashSet;

use crate::env::check_env;
use crate::error::InvalidRecord;
use crate::format::{ClaimRecord, ContainerEdits, OLDEST_RECORD_VERSION, RECORD_VERSION};
use crate::paths::is_clean_absolute as is_clean_abs;

/// Validates a whole claim record.
pub fn validate_record(rec: &ClaimRecord) -> Result<(), InvalidRecord> {
    let bad = |field: String, reason: String| InvalidRecord { field, reason };

    if !(OLDEST_RECORD_VERSION..=RECORD_VERSION).contains(&rec.version) {
        return Err(bad(
            "version".into(),
            format!(
                "unknown record version {} (this build reads {OLDEST_RECORD_VERSION} to \
                 {RECORD_VERSION})",
                rec.version
            ),
        ));
    }
    check_id("claim.uid", &rec.claim.uid)?;
    if rec.version < 2 && !rec.env.is_empty() {
        return Err(bad(
            "env".into(),
            format!(
                "a claim's own env needs record version 2, not {}",
                rec.version
            ),
        ));
    }
    let mut claim_env = HashSet::new();
    for (i, e) in rec.env.iter().enumerate() {
        check_env(&format!("env[{i}]"), &e.name, &e.value)?;
        if !claim_env.insert(e.name.as_str()) {
            return Err(bad(
                format!("env[{i}].name"),
                format!("duplicate variable {}", e.name),
            ));
        }
    }

    let mut names = HashSet::new();
    for (i, dev) in rec.devices.iter().enumerate() {
        let at = format!("devices[{i}]");
        if dev.name.is_empty() {
            return Err(bad(format!("{at}.name"), "empty device name".into()));
        }
        if !names.insert(dev.name.as_str()) {
            return Err(bad(
                format!("{at}.name"),
                format!("device {:?} listed twice", dev.name),
            ));
        }
        validate_edits(&format!("{at}({}).edits", dev.name), &dev.edits)?;
        // One place per variable: a claim's and a device's would leave the value unclear.
        if let Some((j, e)) =
            (dev.edits.env.iter().enumerate()).find(|(_, e)| claim_env.contains(e.name.as_str()))
        {
            return Err(bad(
                format!("{at}({}).edits.env[{j}].name", dev.name),
                format!("{} is set both by the claim and by the device", e.name),
            ));
        }
    }

    // Container labels are built only on error: a pod may list many containers, and
    // graft-nri validates every record it reads.
    let mut pods = HashSet::new();
    for (i, pod) in rec.pods.iter().enumerate() {
        let at = || format!("pods[{i}]");
        check_id(&format!("{}.uid", at()), &pod.uid)?;
        if !pods.insert(pod.uid.as_str()) {
            return Err(bad(
                format!("{}.uid", at()),
                format!("pod {} listed twice", pod.uid),
            ));
        }
        let mut ctrs = HashSet::new();
        for (j, ctr) in pod.containers.iter().enumerate() {
            let cat = || format!("{}.containers[{j}]", at());
            if ctr.name.is_empty() {
                return Err(bad(
                    format!("{}.name", cat()),
                    "empty container name".into(),
                ));
            }
            if !ctrs.insert(ctr.name.as_str()) {
                return Err(bad(
                    format!("{}.name", cat()),
                    format!("container {:?} listed twice", ctr.name),
                ));
            }
            for d in &ctr.devices {
                if !names.contains(d.as_str()) {
                    return Err(bad(
                        format!("{}({}).devices", cat(), ctr.name),
                        format!("names device {d:?}, which the claim does not hold"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Validates what one device adds to a container.
pub fn validate_edits(at: &str, edits: &ContainerEdits) -> Result<(), InvalidRecord> {
    let bad = |field: String, reason: String| InvalidRecord { field, reason };
    for (i, node) in edits.device_nodes.iter().enumerate() {
        let f = format!("{at}.device_nodes[{i}]");
        if !is_clean_abs(&node.path) || !node.path.starts_with("/dev/") {
            return Err(bad(
                format!("{f}.path"),
                format!("device path {:?} is not a clean path under /dev", node.path),
            ));
        }
        if node.major < 0
            || node.minor < 0
            || node.major > u32::MAX as i64
            || node.minor > u32::MAX as i64
        {
            return Err(bad(
                f,
                format!("device number {}:{} out of range", node.major, node.minor),
            ));
        }
        if let Some(mode) = node.file_mode {
            if mode & !0o7777 != 0 {
                return Err(bad(
                    format!("{f}.file_mode"),
                    format!("file mode {mode:#o} has bits beyond permissions"),
                ));
            }
        }
    }
    for (i, m) in edits.mounts.iter().enumerate() {
        let f = format!("{at}.mounts[{i}]");
        if !is_clean_abs(&m.destination) {
            return Err(bad(
                format!("{f}.destination"),
                format!(
                    "mount destination {:?} is not a clean absolute path",
                    m.destination
                ),
            ));
        }
        if m.kind == "bind" && !is_clean_abs(&m.source) {
            return Err(bad(
                format!("{f}.source"),
                format!(
                    "bind mount source {:?} is not a clean absolute path",
                    m.source
                ),
            ));
        }
        if m.kind.is_empty() {
            return Err(bad(format!("{f}.type"), "empty mount type".into()));
        }
    }
    for (i, e) in edits.env.iter().enumerate() {
        check_env(&format!("{at}.env[{i}]"), &e.name, &e.value)?;
    }
    for (i, h) in edits.hooks.iter().enumerate() {
        let f = format!("{at}.hooks[{i}]");
        if !is_clean_abs(&h.path) {
            return Err(bad(
                format!("{f}.path"),
                format!("hook path {:?} is not a clean absolute path", h.path),
            ));
        }
        if let Some(t) = h.timeout {
            if t <= 0 {
                return Err(bad(
                    format!("{f}.timeout"),
                    format!("timeout {t} is not positive"),
                ));
            }
        }
    }
    Ok(())
}

/// A UID used as a file name: the characters Kubernetes UIDs use, nothing that can escape
/// the directory.
pub(crate) fn check_id(field: &str, id: &str) -> Result<(), InvalidRecord> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(InvalidRecord {
            field: field.to_string(),
            reason: format!("{id:?} is not a valid UID"),
        })
    }
}
