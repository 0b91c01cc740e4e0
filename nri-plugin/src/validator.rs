//! graft's NRI validator (`graft-nri --validate`): a second plugin, in a process of its own,
//! that the runtime (NRI v0.10+, containerd 2.2+) asks once every plugin has adjusted a
//! container, before the container is made.
//!
//! Why it exists: containerd counts a plugin whose connection broke during CreateContainer
//! as having answered with no changes, and NRI's default validator counts it as consulted,
//! so when graft-nri is killed at the wrong moment a container whose claims it never served
//! would start without its devices (the kill loop in the test suite showed one per kill).
//! The validator refuses a container that the records give devices to when its pending
//! adjustment lacks graft's edits; the runtime then fails the create, and the kubelet
//! retries it, by when graft-nri is back.
//!
//! It fails closed on its own account too: the runtime fails a create whose validation
//! call errs or breaks, and the chart's `requireGraftNri` annotation names it beside
//! graft-nri, so that NRI's default validator refuses claim pods' containers while it is
//! not connected. Where the runtime has no validation (containerd before 2.2) it idles and
//! says so; graft-nri's after-the-fact report is then what remains.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use graft_nri_sdk::{ConnectionState, EventMask, NriPlugin};
use graft_proto::nri::{self, Event};
use graft_record::{ClaimRecord, InjectionPolicy, RecordStore};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

use crate::inject::{plan, PlanError};
use crate::reads::Reads;
use crate::refusal;

/// The name the validator registers with (and `requireGraftNri` requires).
pub const VALIDATOR_NAME: &str = "graft-validator";
/// Its index: after every mutating plugin, although the runtime validates in a phase of
/// its own whatever the index.
pub const VALIDATOR_INDEX: &str = "99";

/// Where the validator stands with the runtime, for readiness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Not connected yet, or lost; with the reason once there is one.
    Waiting(String),
    /// Connected: every container creation is validated.
    Serving(String),
    /// The runtime has no validation: nothing to do here.
    Unsupported(String),
}

/// The validator plugin.
pub struct Validator {
    store: RecordStore,
    policy: InjectionPolicy,
    reads: Reads,
    standing: Mutex<Standing>,
    allowed: Counter,
    refused: Counter,
}

impl Validator {
    /// A validator over `store`'s records, planning as graft-nri does under `policy`; each
    /// answer within `deadline`.
    pub fn new(store: RecordStore, policy: InjectionPolicy, deadline: Duration) -> Self {
        Validator {
            store,
            policy,
            reads: Reads::new(deadline),
            standing: Mutex::new(Standing::Waiting("not connected yet".into())),
            allowed: Counter::default(),
            refused: Counter::default(),
        }
    }

    /// Where it stands now.
    pub fn standing(&self) -> Standing {
        self.standing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_standing(&self, s: Standing) {
        *self.standing.lock().unwrap_or_else(|p| p.into_inner()) = s;
    }

    /// Registers its counters: containers let through and refused.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "graft_nri_validator_allowed",
            "Container creations the validator let through",
            self.allowed.clone(),
        );
        registry.register(
            "graft_nri_validator_refused",
            "Container creations the validator refused: the records give the container \
             devices and the pending adjustment lacked graft-nri's edits",
            self.refused.clone(),
        );
    }
}

/// Why the validator refuses a container: the records give it devices and the pending
/// adjustment lacks graft-nri's edits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "graft-nri did not give it its devices: {lack} (plugins consulted: {}); graft-nri was \
     not connected, or the runtime lost it during this request. Refused so that it never \
     starts without them; the kubelet retries",
    listed(.consulted)
)]
pub struct Unserved {
    /// What the adjustment lacks.
    pub lack: Lack,
    /// The plugins the runtime consulted, as `index-name`.
    pub consulted: Vec<String>,
}

/// What a pending adjustment lacks of graft-nri's edits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Lack {
    /// An edit of the container's plan, in words.
    #[error("{0}")]
    Edit(String),
    /// No plan at all: graft-nri refuses such a container itself, so reaching here means
    /// it did not answer.
    #[error("its records cannot be applied ({0})")]
    Unplannable(PlanError),
}

/// The consulted plugins in a line; `none` when there were none.
fn listed(consulted: &[String]) -> String {
    if consulted.is_empty() {
        "none".to_string()
    } else {
        consulted.join(", ")
    }
}

/// Whether the pending adjustment `adj` gives container `ctr` of pod `pod_uid` what the
/// pod's records grant it: `Err` says what it lacks when it does not. A container the
/// records give nothing passes.
pub fn verdict(
    claims: &[impl std::borrow::Borrow<ClaimRecord>],
    pod_uid: &str,
    ctr: &str,
    policy: &InjectionPolicy,
    adj: &nri::ContainerAdjustment,
    consulted: &[nri::PluginInstance],
) -> Result<(), Unserved> {
    if claims.is_empty() {
        return Ok(());
    }
    let lack = match plan(claims, pod_uid, ctr, policy) {
        Ok(None) => return Ok(()),
        Ok(Some(p)) => match p.missing_from_adjustment(adj) {
            None => return Ok(()),
            Some(why) => Lack::Edit(why),
        },
        Err(e) => Lack::Unplannable(e),
    };
    let consulted = consulted
        .iter()
        .map(|p| format!("{}-{}", p.index, p.name))
        .collect();
    Err(Unserved { lack, consulted })
}

#[async_trait]
impl NriPlugin for Validator {
    fn events(&self) -> EventMask {
        EventMask::of(&[Event::VALIDATE_CONTAINER_ADJUSTMENT])
    }

    fn connection_state(&self, state: ConnectionState) {
        match state {
            ConnectionState::Configured(info) => {
                self.reads.configured(info.request_timeout_ms);
                self.set_standing(Standing::Serving(format!(
                    "validating every container creation of {} {}",
                    info.name, info.version
                )));
            }
            ConnectionState::Synchronized => {}
            ConnectionState::Disconnected(why) => {
                let mut st = self.standing.lock().unwrap_or_else(|p| p.into_inner());
                // The runtime drops a validator it cannot use: that is no news.
                if !matches!(*st, Standing::Unsupported(_)) {
                    *st = Standing::Waiting(why);
                }
            }
            ConnectionState::Unsupported(info) => {
                self.set_standing(Standing::Unsupported(format!(
                    "{} {} has no container validation (NRI v0.10, containerd 2.2, needed): \
                     idle; graft-nri's report after reconnecting is what remains",
                    info.name, info.version
                )))
            }
        }
    }

    async fn validate_container_adjustment(
        &self,
        req: nri::ValidateContainerAdjustmentRequest,
    ) -> ttrpc::Result<nri::ValidateContainerAdjustmentResponse> {
        let pod = req.pod.clone().unwrap_or_default();
        let ctr = req.container.clone().unwrap_or_default();
        let (store, policy) = (self.store.clone(), self.policy.clone());
        let (uid, name) = (pod.uid.clone(), ctr.name.clone());
        let adj = req.adjust.into_option().unwrap_or_default();
        let consulted = req.plugins;
        // Err: the pod's claims (`namespace/name`, when readable) and the reason.
        type Refused = (Vec<String>, String);
        let read = self.reads.run(
            &pod.uid,
            self.reads.limit(),
            move || -> Result<(), Refused> {
                let claims = store
                    .pod_claims_shared(&uid)
                    .map_err(|e| (Vec::new(), format!("its pod's records cannot be read: {e}")))?;
                verdict(&claims, &uid, &name, &policy, &adj, &consulted).map_err(|why| {
                    let names = claims
                        .iter()
                        .map(|c| format!("{}/{}", c.claim.namespace, c.claim.name))
                        .collect();
                    (names, why.to_string())
                })
            },
        );
        let outcome = match read.await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err((
                Vec::new(),
                format!("graft's validator failed internally: {e}"),
            )),
            Err(e) => Err((Vec::new(), e.to_string())),
        };
        let mut resp = nri::ValidateContainerAdjustmentResponse::new();
        match outcome {
            Ok(()) => {
                self.allowed.inc();
            }
            Err((claims, why)) => {
                self.refused.inc();
                let msg = refusal::message(&pod, &ctr.name, &claims, &why);
                tracing::error!("{msg}");
                refusal::journal(self.store.root().to_path_buf(), &pod, &ctr, &claims, &why);
                resp.reject = true;
                resp.reason = msg;
            }
        }
        Ok(resp)
    }
}

#[cfg(test)]
mod tests;
