//! graft's opaque configurations (a claim's or class's `config[].opaque`, under driver
//! [`crate::DRIVER`]): their `apiVersion`, their kinds, and the two a ComputeDomain's
//! controller writes into its claim templates, typed on both sides. Parsed strictly: an
//! unknown field fails the claim, naming it (serde's `flatten` would turn
//! `deny_unknown_fields` off, so the domain's fields are repeated in both kinds).

use serde::{Deserialize, Serialize};

/// The `apiVersion` of every graft opaque configuration.
pub const API_VERSION: &str = "graft.dev/v1alpha1";
/// The general kind: environment, ownership, mode, and each device family's part.
pub const DEVICE_CONFIG_KIND: &str = "DeviceConfig";
/// A ComputeDomain workload's IMEX channel(s).
pub const CHANNEL_CONFIG_KIND: &str = "ComputeDomainChannelConfig";
/// A ComputeDomain's IMEX daemon on a node.
pub const DAEMON_CONFIG_KIND: &str = "ComputeDomainDaemonConfig";

/// How many IMEX channels a workload claim of a domain gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AllocationMode {
    /// The domain's one channel, its slot.
    Single,
    /// Every channel of the node's clique.
    All,
}

/// `ComputeDomainChannelConfig`: the workload claim template's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChannelConfig {
    /// [`API_VERSION`].
    pub api_version: String,
    /// [`CHANNEL_CONFIG_KIND`].
    pub kind: String,
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

/// `ComputeDomainDaemonConfig`: the IMEX daemon claim template's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DaemonConfig {
    /// [`API_VERSION`].
    pub api_version: String,
    /// [`DAEMON_CONFIG_KIND`].
    pub kind: String,
    /// The domain's uid.
    #[serde(rename = "domainID")]
    pub domain_id: String,
    /// The domain's name.
    pub domain_name: String,
    /// The domain's namespace.
    pub domain_namespace: String,
    /// The clique the domain was placed in (the attribute [`crate::attributes::CLIQUE_ID`]).
    #[serde(rename = "cliqueID")]
    pub clique_id: String,
    /// How many nodes the domain spans.
    pub num_nodes: u32,
}

/// The domain a configuration names: uid, name and namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domain {
    /// The domain's uid.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
}

impl ChannelConfig {
    /// The configuration of a workload claim of `domain`.
    pub fn new(domain: &Domain, allocation_mode: AllocationMode) -> Self {
        ChannelConfig {
            api_version: API_VERSION.into(),
            kind: CHANNEL_CONFIG_KIND.into(),
            domain_id: domain.id.clone(),
            domain_name: domain.name.clone(),
            domain_namespace: domain.namespace.clone(),
            allocation_mode,
        }
    }
}

impl DaemonConfig {
    /// The configuration of `domain`'s IMEX daemon claims, placed in `clique_id`.
    pub fn new(domain: &Domain, clique_id: &str, num_nodes: u32) -> Self {
        DaemonConfig {
            api_version: API_VERSION.into(),
            kind: DAEMON_CONFIG_KIND.into(),
            domain_id: domain.id.clone(),
            domain_name: domain.name.clone(),
            domain_namespace: domain.namespace.clone(),
            clique_id: clique_id.into(),
            num_nodes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain() -> Domain {
        Domain {
            id: "u-1".into(),
            name: "train".into(),
            namespace: "team-a".into(),
        }
    }

    #[test]
    fn the_kinds_read_back_what_they_write() {
        let c = ChannelConfig::new(&domain(), AllocationMode::All);
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["kind"], CHANNEL_CONFIG_KIND);
        assert_eq!(v["domainID"], "u-1");
        assert_eq!(v["allocationMode"], "All");
        assert_eq!(serde_json::from_value::<ChannelConfig>(v).unwrap(), c);
        let d = DaemonConfig::new(&domain(), "c.1", 2);
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v[crate::attributes::CLIQUE_ID], "c.1");
        assert_eq!(v["numNodes"], 2);
        assert_eq!(serde_json::from_value::<DaemonConfig>(v).unwrap(), d);
    }

    #[test]
    fn an_unknown_field_is_refused_by_name() {
        let mut v =
            serde_json::to_value(ChannelConfig::new(&domain(), AllocationMode::Single)).unwrap();
        v["numNodes"] = 2.into();
        let e = serde_json::from_value::<ChannelConfig>(v).unwrap_err();
        assert!(e.to_string().contains("numNodes"), "{e}");
    }
}
