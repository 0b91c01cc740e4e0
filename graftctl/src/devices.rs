//! `graftctl devices`: graft-driver's device snapshot joined with the claim records.

use std::collections::BTreeMap;

use graft_record::devices::{DeviceSnapshot, PublishedDevice};
use serde::Serialize;

use crate::claims::Loaded;
use crate::table::{clean, Style, Table};

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DevicesView {
    pub node: String,
    pub driver: String,
    pub updated_ms: u64,
    pub devices: Vec<DeviceView>,
    /// Found but not published, with why.
    pub unpublished: BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceView {
    pub name: String,
    pub pool: String,
    /// The `type` attribute.
    #[serde(rename = "type")]
    pub kind: String,
    /// The shipped DeviceClass selecting this type (`<type>.<driver>`).
    pub class: String,
    /// `Healthy`, `Unhealthy` or `Degraded`.
    pub health: String,
    /// Why not healthy: `reason: message`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_reason: Option<String>,
    /// What it is, in a few words: GPU UUID, MIG profile, host path.
    pub what: String,
    pub device_nodes: Vec<String>,
    pub attributes: BTreeMap<String, String>,
    /// Prepared claims holding it, `namespace/name`.
    pub claims: Vec<String>,
}

pub fn view(snap: &DeviceSnapshot, claims: &[Loaded]) -> DevicesView {
    DevicesView {
        node: snap.node.clone(),
        driver: snap.driver.clone(),
        updated_ms: snap.updated_ms,
        devices: snap
            .devices
            .iter()
            .map(|d| DeviceView {
                name: d.name.clone(),
                pool: d.pool.clone(),
                kind: d.kind.clone(),
                class: if d.kind.is_empty() {
                    snap.driver.clone()
                } else {
                    format!("{}.{}", d.kind, snap.driver)
                },
                health: d
                    .health
                    .as_ref()
                    .map_or("Healthy".into(), |h| h.condition.clone()),
                health_reason: d
                    .health
                    .as_ref()
                    .map(|h| format!("{}: {}", h.reason, h.message)),
                what: what(d),
                device_nodes: d.device_nodes.clone(),
                attributes: d.attributes.clone(),
                claims: holders(d, claims),
            })
            .collect(),
        unpublished: snap.unpublished.clone(),
    }
}

fn holders(d: &PublishedDevice, claims: &[Loaded]) -> Vec<String> {
    claims
        .iter()
        .filter_map(|l| match l {
            Loaded::Ok(rec) => rec
                .devices
                .iter()
                .any(|r| r.name == d.name && (r.pool.is_empty() || r.pool == d.pool))
                .then(|| format!("{}/{}", rec.claim.namespace, rec.claim.name)),
            Loaded::Unreadable { .. } => None,
        })
        .collect()
}

/// The attributes that say what a device is, in order of how much they say.
fn what(d: &PublishedDevice) -> String {
    use graft_api::attributes::{PATH, PCI_BUS_ID, PRODUCT_NAME, PROFILE, UUID};
    let a = |k: &str| d.attributes.get(k).map(String::as_str);
    match (a(PROFILE), a(UUID), a(PRODUCT_NAME)) {
        (Some(p), Some(u), _) => format!("MIG {p} {u}"),
        (None, Some(u), Some(p)) => format!("{p} {u}"),
        (None, Some(u), None) => u.to_string(),
        _ => a(PCI_BUS_ID)
            .or(a(PATH))
            .map(str::to_string)
            .unwrap_or_else(|| d.device_nodes.join(",")),
    }
}

/// NAME CLASS HEALTH WHAT CLAIM; `wide` adds POOL, TYPE, DEVICE NODES and ATTRIBUTES.
pub fn table(v: &DevicesView, style: Style) -> String {
    let mut headers = vec!["NAME", "CLASS", "HEALTH", "WHAT", "CLAIM"];
    if style.wide {
        headers.extend(["POOL", "TYPE", "DEVICE NODES", "ATTRIBUTES"]);
    }
    let mut t = Table::new(&headers);
    for d in &v.devices {
        let health = match &d.health_reason {
            Some(why) => format!("{} ({why})", d.health),
            None => d.health.clone(),
        };
        let mut row = vec![
            clean(&d.name),
            clean(&d.class),
            clean(&health),
            clean(&d.what),
            clean(&d.claims.join(",")),
        ];
        if style.wide {
            let attrs: Vec<String> = d
                .attributes
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            row.extend([
                clean(&d.pool),
                clean(&d.kind),
                clean(&d.device_nodes.join(",")),
                clean(&attrs.join(",")),
            ]);
        }
        t.row(row);
    }
    let mut out = t.render(style.headers);
    for (name, why) in &v.unpublished {
        out.push_str(&format!("not published: {}: {}\n", clean(name), clean(why)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{record, snapshot};

    #[test]
    fn health_holder_and_what() {
        let v = view(&snapshot(), &[Loaded::Ok(record())]);
        let plain = Style {
            wide: false,
            headers: true,
        };
        assert_eq!(
            table(&v, plain),
            "NAME    CLASS            HEALTH                                           WHAT            CLAIM\n\
             fuse    fuse.graft.dev   Healthy                                          /dev/fuse       demo/fuse-claim\n\
             gpu-0   gpu.graft.dev    Unhealthy (xid-79: GPU has fallen off the bus)   H100 GPU-1234   -\n"
        );
        let wide = table(
            &v,
            Style {
                wide: true,
                headers: false,
            },
        );
        assert!(!wide.contains("NAME"), "{wide}");
        assert!(
            wide.contains("node-a   gpu    /dev/nvidia0   productName=H100,type=gpu,uuid=GPU-1234"),
            "{wide}"
        );
        let json: serde_json::Value = serde_json::to_value(&v).unwrap();
        assert_eq!(json["devices"][0]["claims"][0], "demo/fuse-claim");
        assert_eq!(json["devices"][1]["health"], "Unhealthy");
        assert_eq!(json["devices"][1]["type"], "gpu");
        assert!(json["devices"][0].get("healthReason").is_none());
    }
}
