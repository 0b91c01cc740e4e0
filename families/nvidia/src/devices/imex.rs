//! IMEX channels, and as many places for ComputeDomain IMEX daemons (`imex-daemon-<n>`):
//! offered when the node's GPUs are registered in one NVLink fabric clique.
//! What keeps them from being offered (GPUs in different cliques, no channel major) is a
//! warning, never a failed scan: the GPUs themselves are fine.

use std::collections::{BTreeMap, BTreeSet};

use super::edits;
use crate::nvml::Inventory;
use graft_api::attributes::{CHANNEL, CLIQUE_ID, SLOT, TYPE};
use graft_api::compute_domain::{FAILED_CONDITION, READY_CONDITION};
use graft_api::types;
use graft_driver_core::model::{Attribute, Binding, Device, Kind};

/// `count` channels and `count` daemon places when every GPU that is in a clique is in the same one; none, with a
/// warning, when they disagree or `/proc/devices` has no channel major. With `domains`
/// (ComputeDomains on) a channel's pod is bound only once graft's controller reports the
/// domain Ready on the node (its binding conditions), and a channel may be allocated to
/// several claims at once (DRA consumable capacity, with nothing consumed).
pub fn channels(
    inv: &Inventory,
    majors: &BTreeMap<String, u32>,
    count: u32,
    domains: bool,
) -> Vec<Device> {
    let cliques: BTreeSet<&String> = inv.gpus.iter().filter_map(|g| g.clique.as_ref()).collect();
    let Some(clique) = cliques.first() else {
        return Vec::new();
    };
    if cliques.len() > 1 {
        tracing::warn!(
            cliques = cliques
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            "GPUs report different fabric cliques; IMEX channels need one and are not offered"
        );
        return Vec::new();
    }
    let Some(&major) = majors.get("nvidia-caps-imex-channels") else {
        tracing::warn!(
            "the node is in a fabric clique but /proc/devices has no nvidia-caps-imex-channels \
             entry; IMEX channels are not offered"
        );
        return Vec::new();
    };
    let clique = (*clique).clone();
    let channels = (0..count).map(|n| {
        let mut attributes = BTreeMap::new();
        attributes.insert(TYPE.into(), Attribute::String(types::IMEX_CHANNEL.into()));
        attributes.insert(CHANNEL.into(), Attribute::Int(n.into()));
        attributes.insert(CLIQUE_ID.into(), Attribute::String(clique.clone()));
        let edits = graft_record::ContainerEdits {
            device_nodes: vec![edits::imex_node(major, n)],
            ..Default::default()
        };
        let mut d = device(
            format!("imex-channel-{n}"),
            Kind::Channel,
            attributes,
            edits,
        );
        if domains {
            d.binding = Some(Binding {
                ready: vec![READY_CONDITION.into()],
                failed: vec![FAILED_CONDITION.into()],
            });
            // Several pods of the domain on one node: a channel is the domain's (its slot)
            // for every claim of it, so it may be allocated many times; prepare gives it
            // only to the domain's own claims.
            d.shared = Some(BTreeMap::new());
        }
        d
    });
    // As many places for ComputeDomain IMEX daemons as channels: each domain on the node
    // holds one channel number and one daemon place.
    let daemons = (0..count).map(|n| {
        let mut attributes = BTreeMap::new();
        attributes.insert(TYPE.into(), Attribute::String(types::IMEX_DAEMON.into()));
        attributes.insert(SLOT.into(), Attribute::Int(n.into()));
        attributes.insert(CLIQUE_ID.into(), Attribute::String(clique.clone()));
        device(
            format!("imex-daemon-{n}"),
            Kind::DomainSlot,
            attributes,
            Default::default(),
        )
    });
    channels.chain(daemons).collect()
}

fn device(
    name: String,
    kind: Kind,
    attributes: BTreeMap<String, Attribute>,
    edits: graft_record::ContainerEdits,
) -> Device {
    Device {
        kind,
        name,
        attributes,
        capacity: BTreeMap::new(),
        edits,
        optional_edits: Default::default(),
        consumes: None,
        shared: None,
        binding: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvml::Gpu;

    fn gpu(index: u32, clique: Option<&str>) -> Gpu {
        Gpu {
            index,
            minor: index,
            uuid: format!("GPU-{index}"),
            name: None,
            brand: None,
            architecture: None,
            compute_capability: None,
            memory_bytes: None,
            pci_bus_id: String::new(),
            mig_enabled: false,
            migs: vec![],
            mig_layout: None,
            clique: clique.map(str::to_string),
            nvlink_island: None,
        }
    }

    #[test]
    fn one_clique_or_none() {
        let majors = BTreeMap::from([("nvidia-caps-imex-channels".to_string(), 234)]);
        let mut inv = Inventory {
            driver_version: "580.95.05".into(),
            cuda_driver_version: None,
            gpus: vec![gpu(0, Some("c.1")), gpu(1, None), gpu(2, Some("c.1"))],
            failed: vec![],
        };
        let ch = channels(&inv, &majors, 2, false);
        let names: Vec<&str> = ch.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "imex-channel-0",
                "imex-channel-1",
                "imex-daemon-0",
                "imex-daemon-1"
            ]
        );
        assert_eq!(ch[3].kind, Kind::DomainSlot);
        assert!(ch[3].edits.device_nodes.is_empty());
        assert_eq!(
            ch[3].attributes["cliqueID"],
            Attribute::String("c.1".into())
        );
        assert!(channels(&inv, &BTreeMap::new(), 2, false).is_empty());
        // Two cliques: no channels, and no error either.
        inv.gpus.push(gpu(3, Some("c.2")));
        assert!(channels(&inv, &majors, 2, false).is_empty());
    }

    #[test]
    fn with_compute_domains_a_channel_waits_for_its_domain_and_a_daemon_place_does_not() {
        let majors = BTreeMap::from([("nvidia-caps-imex-channels".to_string(), 234)]);
        let inv = Inventory {
            driver_version: "580.95.05".into(),
            cuda_driver_version: None,
            gpus: vec![gpu(0, Some("c.1"))],
            failed: vec![],
        };
        let ch = channels(&inv, &majors, 1, true);
        let b = ch[0]
            .binding
            .as_ref()
            .expect("the channel's binding conditions");
        assert_eq!(b.ready, [READY_CONDITION]);
        assert_eq!(b.failed, [FAILED_CONDITION]);
        assert_eq!(ch[0].shared, Some(BTreeMap::new()));
        // The daemon's own place: its pod is what makes the domain ready.
        assert_eq!(ch[1].kind, Kind::DomainSlot);
        assert!(ch[1].binding.is_none() && ch[1].shared.is_none());
        assert!(channels(&inv, &majors, 1, false)[0].binding.is_none());
    }
}
