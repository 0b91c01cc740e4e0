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
pub use graft_api::opaque::CHANNEL_CONFIG_KIND as CHANNEL_KIND;
/// The kind of an IMEX daemon's configuration.
pub use graft_api::opaque::DAEMON_CONFIG_KIND as DAEMON_KIND;

/// Why a ComputeDomain configuration is refused; each names the field.
#[derive(Debug, thiserror::Error)]
pub enum DomainConfigError {
    /// The kind is none of [`DomainConfig::KINDS`].
    #[error("{0} is not a ComputeDomain configuration")]
    Kind(String),
    /// The parameters do not parse as their kind (serde names the field).
    #[error(transparent)]
    Parse(#[from] serde_json::Error),
    /// The domain's uid could not go into a node label's key.
    #[error("domainID {0:?} is not a Kubernetes uid")]
    Uid(String),
    /// A name or namespace Kubernetes would not accept.
    #[error("{field} {value:?} is not a Kubernetes name")]
    Name {
        /// The field, as users spell it.
        field: &'static str,
        /// Its value.
        value: String,
    },
}

/// The domain a claim belongs to, as its opaque configuration names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainConfig {
    /// A workload's IMEX channel(s).
    Channel(ChannelConfig),
    /// The domain's IMEX daemon on this node.
    Daemon(DaemonConfig),
}

// The two kinds as the controller writes them: the cluster's contract.
pub use graft_api::opaque::{AllocationMode, ChannelConfig, DaemonConfig};

impl DomainConfig {
    /// The kinds this part parses.
    pub const KINDS: &'static [&'static str] = &[CHANNEL_KIND, DAEMON_KIND];

    /// Parses `params` of `kind` (one of [`Self::KINDS`]); the error names the field.
    pub fn parse(kind: &str, params: &Value) -> Result<Self, DomainConfigError> {
        let (id, name, ns, cfg) = match kind {
            CHANNEL_KIND => {
                let c = ChannelConfig::deserialize(params)?;
                let ids = (c.domain_id.clone(), c.domain_name.clone());
                (
                    ids.0,
                    ids.1,
                    c.domain_namespace.clone(),
                    DomainConfig::Channel(c),
                )
            }
            DAEMON_KIND => {
                let c = DaemonConfig::deserialize(params)?;
                let ids = (c.domain_id.clone(), c.domain_name.clone());
                (
                    ids.0,
                    ids.1,
                    c.domain_namespace.clone(),
                    DomainConfig::Daemon(c),
                )
            }
            other => return Err(DomainConfigError::Kind(other.to_string())),
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
fn check_uid(uid: &str) -> Result<(), DomainConfigError> {
    let ok = !uid.is_empty()
        && uid.len() <= 48
        && uid
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(DomainConfigError::Uid(uid.to_string()))
    }
}

/// `field` as Kubernetes checks it: a subdomain for a name, a label for a namespace.
fn check_name(field: &'static str, v: &str, label: bool) -> Result<(), DomainConfigError> {
    let ok = if label {
        is_dns_label(v)
    } else {
        is_dns_subdomain(v)
    };
    if ok {
        Ok(())
    } else {
        Err(DomainConfigError::Name {
            field,
            value: v.to_string(),
        })
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
        let e = DomainConfig::parse(CHANNEL_KIND, &channel(json!({"colour": "red"})))
            .unwrap_err()
            .to_string();
        assert!(e.contains("colour"), "{e}");
        let e = DomainConfig::parse(CHANNEL_KIND, &channel(json!({"allocationMode": "Some"})))
            .unwrap_err()
            .to_string();
        assert!(e.contains("Some"), "{e}");
        // A uid that would change the label's key, a namespace that is no label.
        for (field, v) in [
            ("domainID", "x/../y"),
            ("domainID", "A"),
            ("domainNamespace", "a.b"),
            ("domainName", "-x"),
        ] {
            let e = DomainConfig::parse(CHANNEL_KIND, &channel(json!({field: v})))
                .unwrap_err()
                .to_string();
            assert!(e.contains(field), "{e}");
        }
    }
}
