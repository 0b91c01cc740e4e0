//! The two opaque configuration kinds graft-compute-domain-controller writes into a
//! ComputeDomain's claim templates (docs/compute-domains.md):
//!
//! ```yaml
//! apiVersion: graft.dev/v1alpha1
//! kind: ComputeDomainChannelConfig      # the workload's IMEX channel(s)
//! domainID: <the domain's uid>
//! domainName: train
//! domainNamespace: team-a
//! allocationMode: Single                # or All
//! ---
//! apiVersion: graft.dev/v1alpha1
//! kind: ComputeDomainDaemonConfig       # the domain's IMEX daemon on the node
//! domainID: <uid>
//! domainName: train
//! domainNamespace: team-a
//! cliqueID: <cluster uuid>.<clique id>
//! numNodes: 2
//! ```
//!
//! Parsed strictly, as graft's `DeviceConfig` is: an unknown field or a value that cannot go
//! where graft puts it (the uid into a node label's key) fails the claim, naming it.

use graft_record::names::{is_dns_label, is_dns_subdomain};
use serde::Deserialize;
use serde_json::Value;

/// The kind of a workload channel's configuration.
pub const CHANNEL_KIND: &str = "ComputeDomainChannelConfig";
/// The kind of an IMEX daemon's configuration.
pub const DAEMON_KIND: &str = "ComputeDomainDaemonConfig";

/// The domain a claim belongs to, as its opaque configuration names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainConfig {
    /// A workload's IMEX channel(s).
    Channel(ChannelConfig),
    /// The domain's IMEX daemon on this node.
    Daemon(DaemonConfig),
}

/// How many channels the workload gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum AllocationMode {
    /// The domain's one channel.
    Single,
    /// Every channel of the node.
    All,
}

/// `ComputeDomainChannelConfig`. (The domain's three fields are repeated in both kinds
/// rather than flattened: serde's `flatten` turns `deny_unknown_fields` off.)
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChannelConfig {
    #[serde(rename = "apiVersion")]
    _api_version: String,
    #[serde(rename = "kind")]
    _kind: String,
    /// The domain's uid.
    #[serde(rename = "domainID")]
    pub domain_id: String,
    /// The domain's name.
    pub domain_name: String,
    /// The domain's namespace, which must be the claim's.
    pub domain_namespace: String,
    /// Single or All.
    pub allocation_mode: AllocationMode,
}

/// `ComputeDomainDaemonConfig`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DaemonConfig {
    #[serde(rename = "apiVersion")]
    _api_version: String,
    #[serde(rename = "kind")]
    _kind: String,
    /// The domain's uid.
    #[serde(rename = "domainID")]
    pub domain_id: String,
    /// The domain's name.
    pub domain_name: String,
    /// The domain's namespace.
    pub domain_namespace: String,
    /// The clique the domain was placed in.
    #[serde(rename = "cliqueID")]
    pub clique_id: String,
    /// How many nodes the domain spans.
    pub num_nodes: u32,
}

impl DomainConfig {
    /// The kinds this part parses.
    pub const KINDS: &'static [&'static str] = &[CHANNEL_KIND, DAEMON_KIND];

    /// Parses `params` of `kind` (one of [`Self::KINDS`]); the error names the field.
    pub fn parse(kind: &str, params: &Value) -> Result<Self, String> {
        let (id, name, ns, cfg) = match kind {
            CHANNEL_KIND => {
                let c = ChannelConfig::deserialize(params).map_err(|e| e.to_string())?;
                let ids = (c.domain_id.clone(), c.domain_name.clone());
                (
                    ids.0,
                    ids.1,
                    c.domain_namespace.clone(),
                    DomainConfig::Channel(c),
                )
            }
            DAEMON_KIND => {
                let c = DaemonConfig::deserialize(params).map_err(|e| e.to_string())?;
                let ids = (c.domain_id.clone(), c.domain_name.clone());
                (
                    ids.0,
                    ids.1,
                    c.domain_namespace.clone(),
                    DomainConfig::Daemon(c),
                )
            }
            other => return Err(format!("{other} is not a ComputeDomain configuration")),
        };
        check_uid(&id)?;
        check_name("domainName", &name, false)?;
        check_name("domainNamespace", &ns, true)?;
        Ok(cfg)
    }

    /// The domain's uid.
    pub fn domain_id(&self) -> &str {
        match self {
            DomainConfig::Channel(c) => &c.domain_id,
            DomainConfig::Daemon(c) => &c.domain_id,
        }
    }
}

/// The uid goes into a label key's name part (`computeDomain.<uid>`, at most 63
/// characters): lower-case alphanumerics and dashes, as Kubernetes writes uids.
fn check_uid(uid: &str) -> Result<(), String> {
    let ok = !uid.is_empty()
        && uid.len() <= 48
        && uid
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!("domainID {uid:?} is not a Kubernetes uid"))
    }
}

/// `field` as Kubernetes checks it: a subdomain for a name, a label for a namespace.
fn check_name(field: &str, v: &str, label: bool) -> Result<(), String> {
    let ok = if label {
        is_dns_label(v)
    } else {
        is_dns_subdomain(v)
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{field} {v:?} is not a Kubernetes name"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const UID: &str = "0b6f7c1e-5d1a-4f7e-9a43-2f1c1d7b2a10";

    fn channel(extra: Value) -> Value {
        let mut v = json!({"apiVersion": "graft.dev/v1alpha1", "kind": CHANNEL_KIND,
            "domainID": UID, "domainName": "train", "domainNamespace": "team-a",
            "allocationMode": "Single"});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    }

    #[test]
    fn both_kinds_parse() {
        let c = DomainConfig::parse(CHANNEL_KIND, &channel(json!({}))).unwrap();
        assert_eq!(c.domain_id(), UID);
        let d = json!({"apiVersion": "graft.dev/v1alpha1", "kind": DAEMON_KIND,
            "domainID": UID, "domainName": "train", "domainNamespace": "team-a",
            "cliqueID": "u.1", "numNodes": 2});
        match DomainConfig::parse(DAEMON_KIND, &d).unwrap() {
            DomainConfig::Daemon(d) => assert_eq!((d.clique_id.as_str(), d.num_nodes), ("u.1", 2)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_fields_are_named() {
        let e = DomainConfig::parse(CHANNEL_KIND, &channel(json!({"colour": "red"}))).unwrap_err();
        assert!(e.contains("colour"), "{e}");
        let e = DomainConfig::parse(CHANNEL_KIND, &channel(json!({"allocationMode": "Some"})))
            .unwrap_err();
        assert!(e.contains("Some"), "{e}");
        // A uid that would change the label's key, a namespace that is no label.
        for (field, v) in [
            ("domainID", "x/../y"),
            ("domainID", "A"),
            ("domainNamespace", "a.b"),
            ("domainName", "-x"),
        ] {
            let e = DomainConfig::parse(CHANNEL_KIND, &channel(json!({field: v}))).unwrap_err();
            assert!(e.contains(field), "{e}");
        }
    }
}
