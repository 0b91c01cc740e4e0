//! A ComputeDomain's devices at prepare. A workload's IMEX channel keeps what it was
//! allocated (its number, the node's clique, whether the claim asks for every channel)
//! and passes the domain's gate ([`crate::domain::gate`]), which checks
//! that against the domain. A daemon place keeps its domain, so that no second domain's
//! daemon place is prepared beside it ([`NvidiaWork::excludes`]). A configuration on the wrong
//! kind of device, or of another clique than the node's, is refused, naming both.

use super::kinds::NvidiaWork;
use super::node::NvidiaSetup;
use crate::domain::clique_label::CLIQUE_ATTRIBUTE;
use crate::domain::{AllocationMode, DomainConfig, DomainRef, Grant};
use crate::setup_error::NvidiaSetupError;
use graft_driver_core::claims::setup_port::SetupError;
use graft_driver_core::model::{Device, Kind};

/// The setup of `device` under a domain's configuration `cd`.
pub fn plan(device: &Device, cd: &DomainConfig) -> Result<Option<NvidiaWork>, SetupError> {
    let refuse = |reason| {
        Err(SetupError::NotSupported {
            device: device.name.clone(),
            reason,
        })
    };
    let clique = device
        .string_attribute(CLIQUE_ATTRIBUTE)
        .unwrap_or_default();
    match (device.kind, cd) {
        (Kind::Channel, DomainConfig::Channel(c)) => {
            let Some(channel) = channel_number(&device.name) else {
                return refuse("an IMEX channel whose name is not imex-channel-<number>");
            };
            if clique.is_empty() {
                return refuse("an IMEX channel without its cliqueID attribute");
            }
            Ok(Some(NvidiaWork::ComputeDomain {
                domain_id: c.domain_id.clone(),
                domain_name: c.domain_name.clone(),
                domain_namespace: c.domain_namespace.clone(),
                // The core stamps the claim's (NvidiaWork::for_claim).
                claim_namespace: String::new(),
                channel: Some(channel),
                clique: clique.to_string(),
                all_channels: c.allocation_mode == AllocationMode::All,
            }))
        }
        (Kind::DomainSlot, DomainConfig::Daemon(c)) => {
            if clique != c.clique_id {
                return Err(NvidiaSetupError::ComputeDomain {
                    domain: format!("{}/{}", c.domain_namespace, c.domain_name),
                    reason: format!(
                        "daemon place {} is of clique {clique:?}, and the domain was placed \
                         in clique {:?}",
                        device.name, c.clique_id
                    ),
                }
                .into());
            }
            Ok(Some(NvidiaWork::ImexDaemon {
                domain_id: c.domain_id.clone(),
                domain_name: c.domain_name.clone(),
                domain_namespace: c.domain_namespace.clone(),
                clique: c.clique_id.clone(),
                // The core stamps the claim's (NvidiaWork::for_claim).
                claim_namespace: String::new(),
            }))
        }
        (_, DomainConfig::Channel(_)) => {
            refuse("a ComputeDomainChannelConfig applies to imex-channel devices only")
        }
        (_, DomainConfig::Daemon(_)) => {
            refuse("a ComputeDomainDaemonConfig applies to imex-daemon devices only")
        }
    }
}

/// `n` of `imex-channel-<n>`, as discovery names the channels.
fn channel_number(name: &str) -> Option<u32> {
    let n = name.strip_prefix("imex-channel-")?;
    // One spelling per number: no sign, no leading zero.
    if n.starts_with('+') || (n.len() > 1 && n.starts_with('0')) {
        return None;
    }
    n.parse().ok()
}

impl NvidiaSetup {
    /// A workload channel's gate: a claim joins only a domain of its own namespace, since
    /// the domain's IMEX channel reaches the memory its other pods export, and only
    /// through the channel the domain holds.
    pub(super) fn join_domain(&self, setup: &NvidiaWork) -> Result<(), SetupError> {
        let NvidiaWork::ComputeDomain {
            domain_id,
            domain_name,
            domain_namespace,
            claim_namespace,
            channel,
            clique,
            all_channels,
        } = setup
        else {
            return Ok(());
        };
        let d = DomainRef {
            id: domain_id.clone(),
            name: domain_name.clone(),
            namespace: domain_namespace.clone(),
        };
        let refuse = |reason: String| {
            NvidiaSetupError::ComputeDomain {
                domain: format!("{domain_namespace}/{domain_name}"),
                reason,
            }
            .into()
        };
        if claim_namespace != domain_namespace {
            return Err(refuse(format!(
                "a claim of namespace {claim_namespace:?} cannot join a domain of another \
                 namespace"
            )));
        }
        // Planned by a graft that kept no channel number: planned again on its next try.
        let Some(channel) = *channel else {
            return Err(refuse(
                "the claim's setup names no channel number (written by an older graft-driver)"
                    .into(),
            ));
        };
        let g = Grant {
            channel,
            clique: clique.clone(),
            all: *all_channels,
        };
        self.domains.join(&d, &g)
    }

    /// A daemon place goes only to a claim of graft's own namespace, where the controller
    /// makes the daemons' claims: a tenant's claim holding one would keep every other
    /// domain's daemon off the node.
    pub(super) fn take_daemon_place(&self, setup: &NvidiaWork) -> Result<(), SetupError> {
        let NvidiaWork::ImexDaemon {
            domain_name,
            domain_namespace,
            claim_namespace,
            ..
        } = setup
        else {
            return Ok(());
        };
        let reason = match self.domains.home() {
            Some(home) if home == claim_namespace => return Ok(()),
            Some(home) => format!(
                "an IMEX daemon place goes only to a claim of graft's namespace {home:?}, which \
                 the ComputeDomain controller makes; this claim is of namespace \
                 {claim_namespace:?}"
            ),
            None => "graft-driver is not connected to the API server yet".into(),
        };
        Err(NvidiaSetupError::ComputeDomain {
            domain: format!("{domain_namespace}/{domain_name}"),
            reason,
        }
        .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::config::{CHANNEL_KIND, DAEMON_KIND};
    use crate::domain::DomainGate;
    use graft_driver_core::model::Attribute;
    use std::sync::{Arc, Mutex};

    const CLIQUE: &str = "c.1";

    fn channel_cfg(mode: &str) -> DomainConfig {
        DomainConfig::parse(
            CHANNEL_KIND,
            &serde_json::json!({"apiVersion": "graft.dev/v1alpha1", "kind": CHANNEL_KIND,
                "domainID": "u-1", "domainName": "train", "domainNamespace": "team-a",
                "allocationMode": mode}),
        )
        .unwrap()
    }

    fn daemon_cfg(uid: &str, clique: &str) -> DomainConfig {
        DomainConfig::parse(
            DAEMON_KIND,
            &serde_json::json!({"apiVersion": "graft.dev/v1alpha1", "kind": DAEMON_KIND,
                "domainID": uid, "domainName": "train", "domainNamespace": "team-a",
                "cliqueID": clique, "numNodes": 2}),
        )
        .unwrap()
    }

    fn dev(name: &str, kind: Kind) -> Device {
        let mut d = Device::new(name, kind);
        d.attributes
            .insert(CLIQUE_ATTRIBUTE.into(), Attribute::String(CLIQUE.into()));
        d
    }

    #[test]
    fn a_channel_config_plans_the_gate_on_channels_only() {
        let ch = dev("imex-channel-0", Kind::Channel);
        let s = plan(&ch, &channel_cfg("Single")).unwrap().unwrap();
        assert!(matches!(&s, NvidiaWork::ComputeDomain { domain_id, .. } if domain_id == "u-1"));
        let s = s.for_claim("team-a", "c1");
        assert!(
            matches!(&s, NvidiaWork::ComputeDomain { claim_namespace, .. } if claim_namespace == "team-a")
        );
        let gpu = dev("gpu-0", Kind::Whole);
        let e = plan(&gpu, &channel_cfg("Single")).unwrap_err();
        assert!(e.to_string().contains("imex-channel devices only"), "{e}");
        let daemon = dev("imex-daemon-0", Kind::DomainSlot);
        assert!(plan(&daemon, &channel_cfg("Single")).is_err());
        assert!(plan(&ch, &daemon_cfg("u-1", CLIQUE)).is_err());
    }

    #[test]
    fn a_channel_keeps_its_number_clique_and_mode() {
        let s = plan(&dev("imex-channel-12", Kind::Channel), &channel_cfg("All"));
        match s.unwrap().unwrap() {
            NvidiaWork::ComputeDomain {
                channel,
                clique,
                all_channels,
                ..
            } => assert_eq!(
                (channel, clique.as_str(), all_channels),
                (Some(12), CLIQUE, true)
            ),
            other => panic!("{other:?}"),
        }
        // A name that is not one number, a channel that names no clique: refused.
        for name in [
            "imex-channel-x",
            "imex-channel-01",
            "imex-channel-+1",
            "imex-channel-",
        ] {
            let e = plan(&dev(name, Kind::Channel), &channel_cfg("Single")).unwrap_err();
            assert!(e.to_string().contains(name), "{e}");
        }
        let bare = Device::new("imex-channel-1", Kind::Channel);
        let e = plan(&bare, &channel_cfg("Single")).unwrap_err();
        assert!(e.to_string().contains("cliqueID"), "{e}");
    }

    #[test]
    fn a_daemon_place_keeps_its_domain_of_the_nodes_clique() {
        let daemon = dev("imex-daemon-0", Kind::DomainSlot);
        let a = plan(&daemon, &daemon_cfg("u-1", CLIQUE)).unwrap().unwrap();
        assert!(
            matches!(&a, NvidiaWork::ImexDaemon { domain_id, clique, .. }
            if domain_id == "u-1" && clique == CLIQUE)
        );
        let e = plan(&daemon, &daemon_cfg("u-1", "d.2")).unwrap_err();
        assert!(
            e.to_string().contains("imex-daemon-0") && e.to_string().contains("d.2"),
            "{e}"
        );
        // A second domain's place beside it is excluded, the same domain's is not.
        let b = plan(&daemon, &daemon_cfg("u-2", CLIQUE)).unwrap().unwrap();
        let e = b.excludes(&a).expect("two domains' daemons on one node");
        assert!(
            e.to_string()
                .contains("held by another ComputeDomain's daemon (domain uid u-1)"),
            "{e}"
        );
        assert!(a.excludes(&a.clone()).is_none());
        let ch = plan(
            &dev("imex-channel-0", Kind::Channel),
            &channel_cfg("Single"),
        );
        assert!(ch.unwrap().unwrap().excludes(&a).is_none());
    }

    /// Records what it was asked; grants everything.
    #[derive(Default)]
    struct Asked(Mutex<Vec<(DomainRef, Grant)>>);

    impl DomainGate for Asked {
        fn home(&self) -> &str {
            "graft-system"
        }

        fn join(&self, d: &DomainRef, g: &Grant) -> Result<(), SetupError> {
            self.0.lock().unwrap().push((d.clone(), g.clone()));
            Ok(())
        }
    }

    fn node_setup(gate: Arc<Asked>) -> NvidiaSetup {
        let domains = crate::domain::GateSlot::new(true);
        domains.set(gate);
        NvidiaSetup {
            vfio: super::super::Vfio {
                sys: "/nonexistent".into(),
                proc: "/nonexistent".into(),
                timeout: std::time::Duration::from_secs(1),
            },
            dev_root: "/nonexistent".into(),
            smi: Box::new(super::super::ChrootSmi {
                root: "/nonexistent".into(),
                path: Default::default(),
            }),
            persistence: Box::new(super::super::Untouched),
            rescan: Box::new(|| {}),
            mig: None,
            mps: None,
            domains,
        }
    }

    #[test]
    fn the_gate_is_asked_with_what_was_allocated() {
        let gate = Arc::new(Asked::default());
        let node = node_setup(gate.clone());
        let s = plan(
            &dev("imex-channel-3", Kind::Channel),
            &channel_cfg("Single"),
        )
        .unwrap()
        .unwrap();
        node.join_domain(&s.clone().for_claim("team-a", "c1"))
            .unwrap();
        let asked = gate.0.lock().unwrap().clone();
        assert_eq!(
            asked[0].1,
            Grant {
                channel: 3,
                clique: CLIQUE.into(),
                all: false
            }
        );
        // Another namespace is refused before the gate is asked.
        let e = node
            .join_domain(&s.clone().for_claim("team-b", "c2"))
            .unwrap_err();
        assert!(e.to_string().contains("another namespace"), "{e}");
        // A setup without its channel number (an older graft's): refused, not granted.
        let mut old = s.for_claim("team-a", "c3");
        if let NvidiaWork::ComputeDomain { channel, .. } = &mut old {
            *channel = None;
        }
        let e = node.join_domain(&old).unwrap_err();
        assert!(e.to_string().contains("no channel number"), "{e}");
        assert_eq!(gate.0.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_daemon_place_goes_to_grafts_namespace_only() {
        let place = plan(
            &dev("imex-daemon-0", Kind::DomainSlot),
            &daemon_cfg("u-1", CLIQUE),
        )
        .unwrap()
        .unwrap();
        let node = node_setup(Arc::new(Asked::default()));
        node.take_daemon_place(&place.clone().for_claim("graft-system", "c1"))
            .unwrap();
        let e = node
            .take_daemon_place(&place.clone().for_claim("team-a", "c2"))
            .unwrap_err();
        assert!(
            e.to_string().contains("graft's namespace \"graft-system\""),
            "{e}"
        );
        // No API client yet: retried.
        let unset = NvidiaSetup {
            domains: Default::default(),
            ..node_setup(Arc::new(Asked::default()))
        };
        assert!(unset
            .take_daemon_place(&place.for_claim("graft-system", "c3"))
            .is_err());
    }
}
