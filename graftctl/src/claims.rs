//! `graftctl claims`: the prepared claims, as their records say.

use std::path::Path;

use graft_record::{claim_file_uids, read_claim_file, ClaimRecord, ContainerEdits};
use serde::Serialize;

use crate::table::{clean, Style, Table};

/// A record that could be read, or why not.
pub enum Loaded {
    Ok(ClaimRecord),
    Unreadable { uid: String, error: String },
}

/// Every claim record of the state directory; unreadable ones are reported, not fatal.
pub fn load(root: &Path) -> anyhow::Result<Vec<Loaded>> {
    Ok(claim_file_uids(root)?
        .into_iter()
        .map(|uid| match read_claim_file(root, &uid) {
            Ok(Some(rec)) => Loaded::Ok(rec),
            Ok(None) => Loaded::Unreadable {
                uid,
                error: "removed while reading (claim unprepared)".into(),
            },
            Err(e) => Loaded::Unreadable {
                uid,
                error: e.to_string(),
            },
        })
        .collect())
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimView {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub devices: Vec<ClaimDevice>,
    pub pods: Vec<PodView>,
    /// Set when the record cannot be read; the other fields are then empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ClaimDevice {
    pub name: String,
    pub pool: String,
    pub requests: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct PodView {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub containers: Vec<ContainerView>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerView {
    pub name: String,
    pub devices: Vec<String>,
    pub edits: EditsView,
}

/// Edits without env values: they can be secrets.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EditsView {
    pub device_nodes: Vec<String>,
    /// `source:destination`.
    pub mounts: Vec<String>,
    pub env_names: Vec<String>,
    /// `stage:path`.
    pub hooks: Vec<String>,
}

impl EditsView {
    pub fn add(&mut self, e: &ContainerEdits) {
        let push = |v: &mut Vec<String>, s: String| {
            if !v.contains(&s) {
                v.push(s);
            }
        };
        for n in &e.device_nodes {
            push(&mut self.device_nodes, n.path.clone());
        }
        for m in &e.mounts {
            push(&mut self.mounts, format!("{}:{}", m.source, m.destination));
        }
        for v in &e.env {
            push(&mut self.env_names, v.name.clone());
        }
        for h in &e.hooks {
            let stage = serde_json::to_value(h.stage)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            push(&mut self.hooks, format!("{stage}:{}", h.path));
        }
    }
}

pub fn view(l: &Loaded) -> ClaimView {
    match l {
        Loaded::Unreadable { uid, error } => ClaimView {
            uid: uid.clone(),
            namespace: String::new(),
            name: String::new(),
            devices: vec![],
            pods: vec![],
            error: Some(error.clone()),
        },
        Loaded::Ok(rec) => ClaimView {
            uid: rec.claim.uid.clone(),
            namespace: rec.claim.namespace.clone(),
            name: rec.claim.name.clone(),
            devices: rec
                .devices
                .iter()
                .map(|d| ClaimDevice {
                    name: d.name.clone(),
                    pool: d.pool.clone(),
                    requests: d.requests.clone(),
                })
                .collect(),
            pods: rec
                .pods
                .iter()
                .map(|p| PodView {
                    uid: p.uid.clone(),
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    containers: p
                        .containers
                        .iter()
                        .map(|c| {
                            let mut edits = EditsView::default();
                            for v in rec.env_for(&p.uid, &c.name) {
                                edits.env_names.push(v.name.clone());
                            }
                            for d in rec.devices_for(&p.uid, &c.name) {
                                edits.add(&d.edits);
                            }
                            ContainerView {
                                name: c.name.clone(),
                                devices: c.devices.clone(),
                                edits,
                            }
                        })
                        .collect(),
                })
                .collect(),
            error: None,
        },
    }
}

/// Whether `l` is the claim `wanted` names: `namespace/name` or a UID.
pub fn matches(l: &Loaded, wanted: &str) -> bool {
    match l {
        Loaded::Ok(rec) => {
            rec.claim.uid == wanted
                || format!("{}/{}", rec.claim.namespace, rec.claim.name) == wanted
        }
        Loaded::Unreadable { uid, .. } => uid == wanted,
    }
}

/// One row per container of each claim (a claim no pod holds yet gets one row). `wide`
/// adds the pod's UID, each device's pool and requests, and mounts as `source:destination`.
pub fn table(claims: &[ClaimView], style: Style) -> String {
    let mut headers = vec![
        "CLAIM",
        "UID",
        "POD",
        "CONTAINER",
        "DEVICES",
        "NODES",
        "MOUNTS",
        "ENV",
        "HOOKS",
    ];
    if style.wide {
        headers.extend(["POD UID", "POOLS", "REQUESTS", "MOUNT SOURCES"]);
    }
    let mut t = Table::new(&headers);
    let mut unreadable = String::new();
    for c in claims {
        let claim = clean(&format!("{}/{}", c.namespace, c.name));
        if let Some(e) = &c.error {
            unreadable.push_str(&format!(
                "claim {}: record unreadable: {}\n",
                clean(&c.uid),
                clean(e)
            ));
            continue;
        }
        let all: Vec<String> = c.devices.iter().map(|d| d.name.clone()).collect();
        // Per device of the claim: `device=pool`, `device=request+request`.
        let pools: Vec<String> = c
            .devices
            .iter()
            .map(|d| format!("{}={}", d.name, d.pool))
            .collect();
        let requests: Vec<String> = c
            .devices
            .iter()
            .map(|d| format!("{}={}", d.name, d.requests.join("+")))
            .collect();
        let mut rows = 0;
        for p in &c.pods {
            for ctr in &p.containers {
                let e = &ctr.edits;
                let mut row = vec![
                    claim.clone(),
                    clean(&c.uid),
                    clean(&format!("{}/{}", p.namespace, p.name)),
                    clean(&ctr.name),
                    clean(&ctr.devices.join(",")),
                    clean(&e.device_nodes.join(",")),
                    clean(
                        &e.mounts
                            .iter()
                            .map(|m| m.rsplit(':').next().unwrap_or(m).to_string())
                            .collect::<Vec<_>>()
                            .join(","),
                    ),
                    clean(&e.env_names.join(",")),
                    clean(&e.hooks.join(",")),
                ];
                if style.wide {
                    let sources: Vec<&str> = e
                        .mounts
                        .iter()
                        .map(|m| m.rsplit_once(':').map_or(m.as_str(), |(s, _)| s))
                        .collect();
                    row.extend([
                        clean(&p.uid),
                        clean(&pools.join(",")),
                        clean(&requests.join(",")),
                        clean(&sources.join(",")),
                    ]);
                }
                t.row(row);
                rows += 1;
            }
        }
        if rows == 0 {
            let mut row = vec![
                claim,
                clean(&c.uid),
                String::new(),
                String::new(),
                clean(&all.join(",")),
            ];
            if style.wide {
                row.resize(9, String::new());
                row.extend([
                    String::new(),
                    clean(&pools.join(",")),
                    clean(&requests.join(",")),
                ]);
            }
            t.row(row);
        }
    }
    t.render(style.headers) + &unreadable
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::record;

    #[test]
    fn table_and_json_without_env_values() {
        let views = vec![
            view(&Loaded::Ok(record())),
            view(&Loaded::Unreadable {
                uid: "bad".into(),
                error: "claims/bad.json: is a symlink".into(),
            }),
        ];
        let style = Style {
            wide: false,
            headers: true,
        };
        let text = table(&views, style);
        assert!(text.starts_with("CLAIM"), "{text}");
        assert!(
            text.contains("demo/fuse-claim   claim-1   demo/web   app         fuse"),
            "{text}"
        );
        assert!(
            text.contains("/dev/fuse") && text.contains("FUSE_TOKEN"),
            "{text}"
        );
        assert!(
            text.ends_with("claim bad: record unreadable: claims/bad.json: is a symlink\n"),
            "{text}"
        );
        let wide = table(
            &views,
            Style {
                wide: true,
                headers: true,
            },
        );
        assert!(
            wide.lines()
                .next()
                .unwrap()
                .ends_with("POD UID   POOLS         REQUESTS    MOUNT SOURCES"),
            "{wide}"
        );
        assert!(
            wide.contains("pod-1     fuse=node-a   fuse=fuse   -"),
            "{wide}"
        );
        let json = serde_json::to_string(&views).unwrap();
        assert!(!json.contains("s3cret") && !text.contains("s3cret"));
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            v[0]["pods"][0]["containers"][0]["edits"]["envNames"][0],
            "FUSE_TOKEN"
        );
        assert_eq!(v[1]["error"], "claims/bad.json: is a symlink");
        assert!(matches(&Loaded::Ok(record()), "demo/fuse-claim"));
        assert!(matches(&Loaded::Ok(record()), "claim-1"));
        assert!(!matches(&Loaded::Ok(record()), "demo/other"));
    }
}
