//! The controller's own record of a domain, a ConfigMap `imex-<uid>` in graft's namespace
//! (tenants cannot write there): its placement (clique and slot), since when it has held
//! no workload claim, why it lost its slot, and its members with their addresses, which
//! graft-imex-daemon reads. The domain's `status` repeats it as a report; nothing the
//! controller or the daemons decide is read back from the status a tenant can write.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

use crate::crd::NodeStatus;

pub use graft_api::compute_domain::record::NODES;
use graft_api::compute_domain::record::{
    CLIQUE, IDLE_SINCE, NAME, NAMESPACE, RELEASED, SLOT, TEMPLATE,
};
use graft_api::compute_domain::{daemon_name, DOMAIN_LABEL};

/// Where a domain goes: its clique and its slot.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Placement {
    /// The clique.
    pub clique: String,
    /// The slot.
    pub slot: u32,
}

/// What the controller keeps of one domain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// The domain's namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its workload ResourceClaimTemplate's name (removed when it loses its slot).
    pub template: String,
    /// Its clique and slot, while it holds one.
    pub placement: Option<Placement>,
    /// Since when it has had no workload claim at all, while it has none.
    pub idle_since: Option<Timestamp>,
    /// Why it lost its slot, until it gets one again.
    pub released: Option<String>,
    /// Its members, as its IMEX daemons list them.
    pub nodes: Vec<NodeStatus>,
}

/// A ConfigMap that is not a record as this controller writes it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ConfigMap {name}: {why}")]
pub struct Malformed {
    /// The ConfigMap.
    pub name: String,
    /// What is wrong.
    pub why: String,
}

impl Record {
    /// The ConfigMap of domain `uid` in graft's namespace `namespace`.
    pub fn to_config_map(&self, uid: &str, namespace: &str) -> ConfigMap {
        let mut data = BTreeMap::new();
        data.insert(NAMESPACE.into(), self.namespace.clone());
        data.insert(NAME.into(), self.name.clone());
        data.insert(TEMPLATE.into(), self.template.clone());
        if let Some(p) = &self.placement {
            data.insert(CLIQUE.into(), p.clique.clone());
            data.insert(SLOT.into(), p.slot.to_string());
        }
        if let Some(t) = &self.idle_since {
            data.insert(IDLE_SINCE.into(), t.to_string());
        }
        if let Some(r) = &self.released {
            data.insert(RELEASED.into(), r.clone());
        }
        // A list of plain structs always serializes.
        let nodes = serde_json::to_string(&self.nodes).unwrap_or_else(|_| "[]".into());
        data.insert(NODES.into(), nodes);
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(daemon_name(uid)),
                namespace: Some(namespace.into()),
                labels: Some(BTreeMap::from([(DOMAIN_LABEL.into(), uid.into())])),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        }
    }

    /// The domain's uid and its record from a ConfigMap this controller wrote.
    pub fn from_config_map(cm: &ConfigMap) -> Result<(String, Record), Malformed> {
        let name = cm.metadata.name.clone().unwrap_or_default();
        let bad = |why: String| Malformed {
            name: name.clone(),
            why,
        };
        let uid = cm
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(DOMAIN_LABEL))
            .filter(|u| daemon_name(u) == name)
            .ok_or_else(|| bad(format!("no {DOMAIN_LABEL} label matching its name")))?
            .clone();
        let empty = BTreeMap::new();
        let data = cm.data.as_ref().unwrap_or(&empty);
        let get = |k: &str| data.get(k).cloned().unwrap_or_default();
        let placement = match (data.get(CLIQUE), data.get(SLOT)) {
            (Some(c), Some(s)) => Some(Placement {
                clique: c.clone(),
                slot: s
                    .parse()
                    .map_err(|_| bad(format!("{SLOT} {s:?} is not a number")))?,
            }),
            (None, None) => None,
            _ => return Err(bad(format!("{CLIQUE} and {SLOT} go together"))),
        };
        let idle_since = data
            .get(IDLE_SINCE)
            .map(|t| {
                t.parse::<Timestamp>()
                    .map_err(|e| bad(format!("{IDLE_SINCE} {t:?}: {e}")))
            })
            .transpose()?;
        Ok((
            uid,
            Record {
                namespace: get(NAMESPACE),
                name: get(NAME),
                template: get(TEMPLATE),
                placement,
                idle_since,
                released: data.get(RELEASED).cloned(),
                nodes: nodes(cm)?,
            },
        ))
    }
}

/// The members a record lists (graft-imex-daemon's view of its domain).
pub fn nodes(cm: &ConfigMap) -> Result<Vec<NodeStatus>, Malformed> {
    match cm.data.as_ref().and_then(|d| d.get(NODES)) {
        None => Ok(Vec::new()),
        Some(text) => serde_json::from_str(text).map_err(|e| Malformed {
            name: cm.metadata.name.clone().unwrap_or_default(),
            why: format!("{NODES}: {e}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::Readiness;

    #[test]
    fn a_record_reads_back_as_written() {
        let r = Record {
            namespace: "ns".into(),
            name: "d".into(),
            template: "work".into(),
            placement: Some(Placement {
                clique: "u.1".into(),
                slot: 3,
            }),
            idle_since: Some("2026-01-02T03:04:05Z".parse().unwrap()),
            released: None,
            nodes: vec![NodeStatus {
                name: "a".into(),
                ip_address: "10.0.0.1".into(),
                clique_id: "u.1".into(),
                status: Readiness::Ready,
                index: Some(0),
            }],
        };
        let cm = r.to_config_map("uid-1", "graft");
        assert_eq!(cm.metadata.name.as_deref(), Some("imex-uid-1"));
        assert_eq!(
            Record::from_config_map(&cm),
            Ok(("uid-1".into(), r.clone()))
        );
        let released = Record {
            placement: None,
            idle_since: None,
            released: Some("no claim".into()),
            ..r
        };
        let cm = released.to_config_map("uid-1", "graft");
        assert_eq!(Record::from_config_map(&cm).unwrap().1, released);
    }

    #[test]
    fn a_foreign_or_broken_config_map_is_refused() {
        let mut cm = Record::default().to_config_map("uid-1", "graft");
        cm.metadata.name = Some("imex-uid-2".into());
        assert!(Record::from_config_map(&cm).is_err());
        let mut cm = Record::default().to_config_map("uid-1", "graft");
        let data = cm.data.get_or_insert_with(Default::default);
        data.insert(SLOT.into(), "x".into());
        data.insert(CLIQUE.into(), "u.1".into());
        let e = Record::from_config_map(&cm).unwrap_err();
        assert!(e.why.contains("slot"), "{e}");
        if let Some(d) = cm.data.as_mut() {
            d.insert(SLOT.into(), "1".into());
            d.remove(CLIQUE);
        }
        assert!(Record::from_config_map(&cm).is_err());
        if let Some(d) = cm.data.as_mut() {
            d.insert(NODES.into(), "{".into());
        }
        assert!(nodes(&cm).is_err());
    }
}
