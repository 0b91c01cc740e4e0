//! `graftctl status`: graft-nri's status file and liveness, graft-driver's snapshot, counts.

use std::path::Path;

use graft_record::devices::DeviceSnapshot;
use graft_record::{plugin_alive, read_boot_id, read_status, NriStatus, BOOT_ID_PATH};
use serde::Serialize;

use crate::claims::Loaded;
use crate::table::clean;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusView {
    pub state_dir: String,
    pub nri: NriView,
    /// `None` when graft-driver has written no device snapshot.
    pub driver: Option<DriverView>,
    pub counts: Counts,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NriView {
    /// The status file, as graft-nri last wrote it (`None`: it never ran here).
    pub status: Option<NriStatus>,
    /// Some process holds graft-nri's liveness lock.
    pub alive: bool,
    /// The status was written in this boot.
    pub this_boot: bool,
    /// Ready for graft-driver to prepare claims: alive, this boot, connected, synchronized.
    pub ready: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DriverView {
    pub version: String,
    pub pid: u32,
    pub node: String,
    pub driver: String,
    pub updated_ms: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    pub devices: usize,
    pub unhealthy_devices: usize,
    pub claims: usize,
    pub unreadable_claims: usize,
    pub containers: usize,
}

pub fn view(
    root: &Path,
    snap: Option<&DeviceSnapshot>,
    claims: &[Loaded],
    containers: usize,
) -> anyhow::Result<StatusView> {
    let status = read_status(root)?;
    let alive = plugin_alive(root)?;
    let boot = read_boot_id(Path::new(BOOT_ID_PATH)).unwrap_or_default();
    let this_boot = status.as_ref().is_some_and(|s| s.boot_id == boot);
    let ready = alive
        && this_boot
        && status
            .as_ref()
            .is_some_and(|s| s.connected && s.synchronized);
    let unreadable = claims
        .iter()
        .filter(|c| matches!(c, Loaded::Unreadable { .. }))
        .count();
    Ok(StatusView {
        state_dir: root.display().to_string(),
        nri: NriView {
            status,
            alive,
            this_boot,
            ready,
        },
        driver: snap.map(|s| DriverView {
            version: s.driver_version.clone(),
            pid: s.pid,
            node: s.node.clone(),
            driver: s.driver.clone(),
            updated_ms: s.updated_ms,
        }),
        counts: Counts {
            devices: snap.map_or(0, |s| s.devices.len()),
            unhealthy_devices: snap.map_or(0, |s| {
                s.devices
                    .iter()
                    .filter(|d| {
                        d.health
                            .as_ref()
                            .is_some_and(|h| h.condition == "Unhealthy")
                    })
                    .count()
            }),
            claims: claims.len() - unreadable,
            unreadable_claims: unreadable,
            containers,
        },
    })
}

pub fn text(v: &StatusView) -> String {
    let mut out = format!("State directory:  {}\n", clean(&v.state_dir));
    let nri = match &v.nri.status {
        None => "never ran here (no nri-status.json)".to_string(),
        Some(s) => {
            let state = if v.nri.ready {
                "ready".to_string()
            } else if !v.nri.alive {
                "NOT RUNNING".to_string()
            } else if !v.nri.this_boot {
                "status from an earlier boot".to_string()
            } else if !s.connected {
                format!(
                    "NOT CONNECTED: {}",
                    clean(s.message.as_deref().unwrap_or("-"))
                )
            } else {
                "not yet synchronized".to_string()
            };
            format!(
                "{state}; plugin {} pid {}, runtime {} {}, uninjected containers found {}",
                clean(&s.plugin),
                s.pid,
                clean(&s.runtime_name),
                clean(&s.runtime_version),
                s.uninjected_found
            )
        }
    };
    out.push_str(&format!("graft-nri:        {nri}\n"));
    let driver = match &v.driver {
        None => "no device snapshot (devices.json) yet".to_string(),
        Some(d) => format!(
            "version {} pid {}, driver {} on node {}",
            clean(&d.version),
            d.pid,
            clean(&d.driver),
            clean(&d.node)
        ),
    };
    out.push_str(&format!("graft-driver:     {driver}\n"));
    let c = &v.counts;
    out.push_str(&format!(
        "Devices:          {} published, {} unhealthy\nClaims:           {} prepared{}\n\
         Containers:       {} injected\n",
        c.devices,
        c.unhealthy_devices,
        c.claims,
        if c.unreadable_claims > 0 {
            format!(", {} UNREADABLE", c.unreadable_claims)
        } else {
            String::new()
        },
        c.containers
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{record, snapshot};

    #[test]
    fn without_a_plugin() {
        let d = tempfile::tempdir().unwrap();
        let snap = snapshot();
        let v = view(d.path(), Some(&snap), &[Loaded::Ok(record())], 3).unwrap();
        let t = text(&v);
        assert!(t.contains("graft-nri:        never ran here"), "{t}");
        assert!(t.contains("version 0.1.0 pid 42"), "{t}");
        assert!(t.contains("2 published, 1 unhealthy"), "{t}");
        assert!(t.contains("Containers:       3 injected"), "{t}");
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["nri"]["ready"], false);
        assert_eq!(json["counts"]["claims"], 1);
    }
}
