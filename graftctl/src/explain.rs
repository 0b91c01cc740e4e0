//! `graftctl explain <container>`: graft-nri's entry for the container, and whether the
//! records it names are still there.

use std::path::Path;

use anyhow::bail;
use graft_record::containers::{read_entry, ContainerEntry};
use graft_record::read_claim_file;
use serde::Serialize;

use crate::table::clean;
use crate::target;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExplainView {
    /// The entry as graft-nri wrote it at CreateContainer.
    pub container: ContainerEntry,
    /// Each record the container was injected from, now.
    pub records: Vec<RecordState>,
    /// Earlier instances of the container (restarts) still recorded, newest first; only
    /// when it was named as `namespace/pod/container`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordState {
    pub claim_uid: String,
    pub record: String,
    /// `present`, `gone` (the claim was unprepared since) or `unreadable`.
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What `wanted` (any form [`target::parse`] takes) received, from which records.
pub fn view(root: &Path, wanted: &str) -> anyhow::Result<ExplainView> {
    let found = target::resolve(root, &target::parse(wanted)?, wanted)?;
    let id = found.id;
    let Some(container) = read_entry(root, &id)? else {
        bail!("container {id}'s entry was removed while reading it (the container is gone)");
    };
    let records = container
        .records
        .iter()
        .map(|r| {
            let (state, error) = match read_claim_file(root, &r.claim_uid) {
                Ok(Some(_)) => ("present", None),
                Ok(None) => ("gone", None),
                Err(e) => ("unreadable", Some(e.to_string())),
            };
            RecordState {
                claim_uid: r.claim_uid.clone(),
                record: r.record.clone(),
                state: state.into(),
                error,
            }
        })
        .collect();
    Ok(ExplainView {
        container,
        records,
        earlier: found.earlier,
    })
}

pub fn text(v: &ExplainView) -> String {
    let c = &v.container;
    let mut out = format!(
        "Container:  {} ({})\nPod:        {}/{} ({})\nInjected:   {}\n",
        clean(&c.container),
        clean(&c.id),
        clean(&c.pod.namespace),
        clean(&c.pod.name),
        clean(&c.pod.uid),
        age(c.injected_ms)
    );
    if !v.earlier.is_empty() {
        out.push_str(&format!(
            "Earlier:    {} (instances before a restart; explain one by its id)\n",
            clean(&v.earlier.join(", "))
        ));
    }
    out.push_str("Records:\n");
    for (r, s) in c.records.iter().zip(&v.records) {
        let state = match (s.state.as_str(), &s.error) {
            ("gone", _) => "GONE: the claim was unprepared since".to_string(),
            (_, Some(e)) => format!("unreadable: {}", clean(e)),
            (st, None) => st.to_string(),
        };
        out.push_str(&format!(
            "  {}/{} ({})  {}  requests: {}  devices: {}  [{state}]\n",
            clean(&r.namespace),
            clean(&r.name),
            clean(&r.claim_uid),
            clean(&r.record),
            clean(&r.requests.join(",")),
            clean(&r.devices.join(",")),
        ));
    }
    let e = &c.edits;
    out.push_str("Edits applied:\n");
    for n in &e.device_nodes {
        out.push_str(&format!(
            "  device  {} ({} {}:{})\n",
            clean(&n.path),
            n.kind.as_str(),
            n.major,
            n.minor
        ));
    }
    for m in &e.mounts {
        out.push_str(&format!(
            "  mount   {} <- {} ({} {})\n",
            clean(&m.destination),
            clean(&m.source),
            clean(&m.kind),
            clean(&m.options.join(","))
        ));
    }
    for n in &e.env_names {
        out.push_str(&format!("  env     {}\n", clean(n)));
    }
    for h in &e.hooks {
        let stage = serde_json::to_value(h.stage)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        out.push_str(&format!("  hook    {stage} {}\n", clean(&h.path)));
    }
    out
}

/// `12s ago`, `5m ago`, `3h ago`, `2d ago`.
fn age(ms: u64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let s = now.saturating_sub(ms) / 1000;
    match s {
        0..60 => format!("{s}s ago"),
        60..3600 => format!("{}m ago", s / 60),
        3600..86400 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::record;
    use graft_record::containers::{
        write_entry, AppliedEdits, PodRef, RecordRef, CONTAINER_ENTRY_VERSION,
    };
    use graft_record::RecordStore;

    #[test]
    fn entry_with_a_present_and_a_gone_record() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        RecordStore::open(root)
            .unwrap()
            .put_claim(&record())
            .unwrap();
        let rec = |uid: &str| RecordRef {
            claim_uid: uid.into(),
            namespace: "demo".into(),
            name: format!("c-{uid}"),
            record: format!("claims/{uid}.json"),
            requests: vec!["fuse".into()],
            devices: vec!["fuse".into()],
        };
        let entry = ContainerEntry {
            version: CONTAINER_ENTRY_VERSION,
            id: "0123abcd".into(),
            pod: PodRef {
                uid: "pod-1".into(),
                namespace: "demo".into(),
                name: "web".into(),
            },
            container: "app".into(),
            injected_ms: 5,
            records: vec![rec("claim-1"), rec("claim-2")],
            edits: AppliedEdits::from_edits(&record().devices[0].edits),
        };
        write_entry(root, &entry).unwrap();
        let v = view(root, "0123").unwrap();
        let t = text(&v);
        assert!(t.contains("Container:  app (0123abcd)"), "{t}");
        assert!(
            t.contains("claims/claim-1.json") && t.contains("[present]"),
            "{t}"
        );
        assert!(t.contains("GONE: the claim was unprepared since"), "{t}");
        assert!(t.contains("device  /dev/fuse (c 10:229)"), "{t}");
        assert!(
            t.contains("env     FUSE_TOKEN") && !t.contains("s3cret"),
            "{t}"
        );
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["records"][1]["state"], "gone");
        assert_eq!(json["container"]["pod"]["name"], "web");
        let e = view(root, "../x").unwrap_err().to_string();
        assert!(e.contains("not a valid"), "{e}");
        let e = view(root, "ffff").unwrap_err().to_string();
        assert!(e.contains("no container \"ffff\""), "{e}");
    }
}
