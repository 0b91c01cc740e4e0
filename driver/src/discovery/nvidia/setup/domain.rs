//! A ComputeDomain's devices at prepare: a workload's IMEX channel passes the domain's gate
//! ([`crate::discovery::nvidia::domain::gate`]); the domain's IMEX daemon place needs no
//! node-side work. A configuration on the wrong kind of device is refused, naming both.

use super::node::NvidiaSetup;
use crate::claims::setup_port::{Setup, SetupError};
use crate::discovery::nvidia::domain::{DomainConfig, DomainRef};
use crate::model::{Device, Kind};

/// The setup of `device` under a domain's configuration `cd`.
pub fn plan(device: &Device, cd: &DomainConfig) -> Result<Option<Setup>, SetupError> {
    let refuse = |reason| {
        Err(SetupError::NotSupported {
            device: device.name.clone(),
            reason,
        })
    };
    match (device.kind, cd) {
        (Kind::ImexChannel, DomainConfig::Channel(c)) => Ok(Some(Setup::ComputeDomain {
            domain_id: c.domain_id.clone(),
            domain_name: c.domain_name.clone(),
            domain_namespace: c.domain_namespace.clone(),
            // The core stamps the claim's (Setup::for_claim).
            claim_namespace: String::new(),
        })),
        (Kind::ImexDaemon, DomainConfig::Daemon(_)) => Ok(None),
        (_, DomainConfig::Channel(_)) => {
            refuse("a ComputeDomainChannelConfig applies to imex-channel devices only")
        }
        (_, DomainConfig::Daemon(_)) => {
            refuse("a ComputeDomainDaemonConfig applies to imex-daemon devices only")
        }
    }
}

impl NvidiaSetup {
    /// A workload channel's gate: a claim joins only a domain of its own namespace, since
    /// the domain's IMEX channel reaches the memory its other pods export.
    pub(super) fn join_domain(&self, setup: &Setup) -> Result<(), SetupError> {
        let Setup::ComputeDomain {
            domain_id,
            domain_name,
            domain_namespace,
            claim_namespace,
        } = setup
        else {
            return Ok(());
        };
        let d = DomainRef {
            id: domain_id.clone(),
            name: domain_name.clone(),
            namespace: domain_namespace.clone(),
        };
        if claim_namespace != domain_namespace {
            return Err(SetupError::ComputeDomain {
                domain: format!("{domain_namespace}/{domain_name}"),
                reason: format!(
                    "a claim of namespace {claim_namespace:?} cannot join a domain of \
                     another namespace"
                ),
            });
        }
        self.domains.join(&d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::nvidia::domain::config::CHANNEL_KIND;

    fn channel_cfg() -> DomainConfig {
        DomainConfig::parse(
            CHANNEL_KIND,
            &serde_json::json!({"apiVersion": "graft.dev/v1alpha1", "kind": CHANNEL_KIND,
                "domainID": "u-1", "domainName": "train", "domainNamespace": "team-a",
                "allocationMode": "Single"}),
        )
        .unwrap()
    }

    #[test]
    fn a_channel_config_plans_the_gate_on_channels_only() {
        let ch = Device::new("imex-channel-0", Kind::ImexChannel);
        let s = plan(&ch, &channel_cfg()).unwrap().unwrap();
        assert!(matches!(&s, Setup::ComputeDomain { domain_id, .. } if domain_id == "u-1"));
        let s = s.for_claim("team-a", "c1");
        assert!(
            matches!(&s, Setup::ComputeDomain { claim_namespace, .. } if claim_namespace == "team-a")
        );
        let gpu = Device::new("gpu-0", Kind::Gpu);
        let e = plan(&gpu, &channel_cfg()).unwrap_err();
        assert!(e.to_string().contains("imex-channel devices only"), "{e}");
        let daemon = Device::new("imex-daemon-0", Kind::ImexDaemon);
        assert!(plan(&daemon, &channel_cfg()).is_err());
        let daemon_cfg = DomainConfig::parse(
            crate::discovery::nvidia::domain::config::DAEMON_KIND,
            &serde_json::json!({"apiVersion": "graft.dev/v1alpha1", "kind": "ComputeDomainDaemonConfig",
                "domainID": "u-1", "domainName": "train", "domainNamespace": "team-a",
                "cliqueID": "c.1", "numNodes": 2}),
        )
        .unwrap();
        assert_eq!(plan(&daemon, &daemon_cfg).unwrap(), None);
        assert!(plan(&ch, &daemon_cfg).is_err());
    }
}
