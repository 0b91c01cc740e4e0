//! The gate a ComputeDomain's workload channel passes before it is handed out: the channel
//! is the domain's own ([`bound_here`]: in `Single` mode its slot's number, of its clique;
//! `All` only for a domain whose spec says `All`), this node labelled
//! `resource.graft.dev/computeDomain.<uid>=true` (so the domain's IMEX daemon is scheduled
//! here), and the domain's status listing this node Ready. A channel that is not the
//! domain's is refused at once; until the domain is Ready here, prepare fails with
//! [`NvidiaSetupError::ComputeDomain`](crate::setup::NvidiaSetupError)
//! and the kubelet retries it: a container that got its channel before the IMEX domain
//! formed would fail at its first import.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node};

use super::record::{record_name, with_record};
use super::refusal::{DomainRef, Grant, Refusal};
use graft_api::compute_domain::{
    AllocationMode, ComputeDomain, ComputeDomainSpec, ComputeDomainStatus, Readiness,
};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde::Deserialize;

use graft_driver_core::claims::setup_port::SetupError;

/// The node label that puts a node in a domain (one key per domain), which the controller
/// takes from nodes that are no members.
pub use graft_api::compute_domain::node_label;

/// Labels the node for a domain and tells whether the domain is Ready on it.
pub trait DomainGate: Send + Sync {
    /// Ok once `grant` is the domain's own channel, the node is labelled and the domain
    /// lists it Ready; an error otherwise (the kubelet retries it).
    fn join(&self, domain: &DomainRef, grant: &Grant) -> Result<(), SetupError>;
    /// graft's own namespace, where the controller makes the IMEX daemons' claims.
    fn home(&self) -> &str;
}

/// Set once graft-driver has its API client; a prepare before that is retried. It also
/// knows whether ComputeDomains are on for this node: then an IMEX channel goes only to a
/// domain's workload claim.
#[derive(Clone, Default)]
pub struct GateSlot {
    gate: Arc<std::sync::OnceLock<Arc<dyn DomainGate>>>,
    on: bool,
}

impl GateSlot {
    /// An empty slot; `on`: ComputeDomains are on for this node (the chart passes
    /// `--nvidia-clique-label` exactly then).
    pub fn new(on: bool) -> Self {
        GateSlot {
            gate: Default::default(),
            on,
        }
    }

    /// Whether ComputeDomains are on for this node.
    pub fn on(&self) -> bool {
        self.on
    }

    /// Puts the gate in; a second call is ignored.
    pub fn set(&self, gate: Arc<dyn DomainGate>) {
        let _ = self.gate.set(gate);
    }

    /// graft's own namespace, once the gate is in.
    pub fn home(&self) -> Option<&str> {
        self.gate.get().map(|g| g.home())
    }

    /// The gate's answer, or a retryable error when there is none yet.
    pub fn join(&self, domain: &DomainRef, grant: &Grant) -> Result<(), SetupError> {
        match self.gate.get() {
            Some(g) => g.join(domain, grant),
            None => Err(domain.refuse("graft-driver is not connected to the API server yet")),
        }
    }
}

/// The gate through the API server: this node's labels and the domain's status.
pub struct KubeGate {
    /// The API server.
    pub client: kube::Client,
    /// This node.
    pub node: String,
    /// graft's own namespace (the client's: its service account's).
    pub home: String,
    /// The runtime the calls run on (prepare runs on a blocking thread).
    pub runtime: tokio::runtime::Handle,
    /// How long one round of calls may take.
    pub timeout: Duration,
    /// How long a prepare waits for the domain to turn Ready here before it refuses (the
    /// kubelet retries a refused prepare only at the pod's next resync, a minute or more
    /// later, while a domain forms in seconds); within the kubelet's deadline for the call.
    pub wait: Duration,
}

// Read as a dynamic object, its status typed only once the controller's record replaced
// it ([`with_record`]): a status a tenant wrote cannot fail the read.
fn domains_resource() -> ApiResource {
    ApiResource::erase::<ComputeDomain>(&())
}

/// The status [`with_record`] put in `cd`, typed.
fn status_of(d: &DomainRef, cd: &DynamicObject) -> Result<ComputeDomainStatus, SetupError> {
    match cd.data.get("status") {
        None | Some(serde_json::Value::Null) => Ok(ComputeDomainStatus::default()),
        Some(v) => ComputeDomainStatus::deserialize(v)
            .map_err(|e| d.refuse(format!("its status cannot be read ({e}); retried"))),
    }
}

impl KubeGate {
    async fn join_async(&self, d: &DomainRef, g: &Grant) -> Result<(), Refusal> {
        let api_err = |what: &str, e: kube::Error| Refusal::Retry(d.refuse(format!("{what}: {e}")));
        // The domain first: a channel that is not its own labels nothing.
        let domains: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &d.namespace, &domains_resource());
        let cd = domains
            .get(&d.name)
            .await
            .map_err(|e| api_err("reading the ComputeDomain", e))?;
        // Placement and members as the controller keeps them in graft's namespace, never
        // the domain's status, which whoever may write the domain may also write.
        let records: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.home);
        let record = records
            .get_opt(&record_name(&d.id))
            .await
            .map_err(|e| api_err("reading the domain's record", e))?;
        let cd = with_record(d, cd, record.as_ref())?;
        bound_here(d, g, &cd)?;
        let nodes: Api<Node> = Api::all(self.client.clone());
        let key = node_label(&d.id);
        let node = nodes
            .get(&self.node)
            .await
            .map_err(|e| api_err("reading this node", e))?;
        let labelled = node.metadata.labels.as_ref().and_then(|l| l.get(&key));
        if labelled.map(String::as_str) != Some("true") {
            let patch = serde_json::json!({"metadata": {"labels": {key.as_str(): "true"}}});
            nodes
                .patch(&self.node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| api_err("labelling this node for the domain", e))?;
            tracing::info!(domain = %d.id, node = %self.node, "labelled the node for a ComputeDomain");
        }
        ready_here(d, &self.node, &cd).map_err(Refusal::Retry)
    }
}

/// Whether `cd` is the domain `d` names and `g` is a channel it may give: of the domain's
/// clique (`status.clique`, which must be this node's), and in `Single` mode exactly the
/// domain's slot (`status.slot`: every node of the domain uses that one number, and the
/// others are other domains'). `All` is granted only to a domain whose own spec asks for
/// it: the controller then pins no number, and the node holds no other domain's daemon
/// ([`crate::setup::NvidiaWork::excludes`]).
pub fn bound_here(d: &DomainRef, g: &Grant, cd: &DynamicObject) -> Result<(), Refusal> {
    if cd.metadata.uid.as_deref() != Some(d.id.as_str()) {
        return Err(Refusal::Final(d.refuse(format!(
            "its uid is {:?}, not the {:?} the claim was made for (deleted and made again?)",
            cd.metadata.uid.as_deref().unwrap_or(""),
            d.id
        ))));
    }
    let status = status_of(d, cd).map_err(Refusal::Retry)?;
    let (Some(clique), Some(slot)) = (status.clique.as_deref(), status.slot) else {
        return Err(Refusal::Retry(d.refuse(
            "the domain has no clique and slot yet (its controller places it); retried",
        )));
    };
    let channel = format!("IMEX channel {}", g.channel);
    if clique != g.clique {
        return Err(Refusal::Final(d.refuse(format!(
            "{channel} is of clique {:?}, and the domain was placed in clique {clique:?}",
            g.clique
        ))));
    }
    let spec = ComputeDomainSpec::deserialize(&cd.data["spec"])
        .map_err(|e| Refusal::Final(d.refuse(format!("its spec cannot be read: {e}"))))?;
    let domain_all = spec.channel.allocation_mode == AllocationMode::All;
    if g.all && !domain_all {
        return Err(Refusal::Final(d.refuse(
            "the claim asks for All channels, and the domain's allocationMode is Single: only \
             a domain made with allocationMode All may hold every channel of a node",
        )));
    }
    if !g.all && g.channel != slot {
        return Err(Refusal::Final(d.refuse(format!(
            "{channel} is not the domain's: in Single mode a claim of the domain gets only \
             channel {slot}, its slot (the other numbers are other domains')"
        ))));
    }
    Ok(())
}

/// Whether the domain's status lists `node` Ready (`cd` is the domain `d` names, as
/// [`bound_here`] checked).
pub fn ready_here(d: &DomainRef, node: &str, cd: &DynamicObject) -> Result<(), SetupError> {
    let status = status_of(d, cd)?;
    match status
        .nodes
        .iter()
        .find(|n| n.name == node)
        .map(|n| n.status)
    {
        Some(Readiness::Ready) => Ok(()),
        Some(other) => Err(d.refuse(format!(
            "not ready on node {node} yet (its IMEX daemon here is {other:?}); retried"
        ))),
        None => Err(d.refuse(format!(
            "not ready on node {node} yet (no IMEX daemon of the domain here yet); retried"
        ))),
    }
}

impl DomainGate for KubeGate {
    fn home(&self) -> &str {
        &self.home
    }

    fn join(&self, d: &DomainRef, g: &Grant) -> Result<(), SetupError> {
        let start = std::time::Instant::now();
        loop {
            let call = tokio::time::timeout(self.timeout, self.join_async(d, g));
            let r = match self.runtime.block_on(call) {
                Ok(r) => r,
                Err(_) => Err(Refusal::Retry(d.refuse(format!(
                    "the API server did not answer within {:?}",
                    self.timeout
                )))),
            };
            // The domain's daemon here needs the label just set, then its pod, then its
            // peers: look again every second until the wait is spent. A channel that is
            // not the domain's is refused at once.
            match r {
                Ok(()) => return Ok(()),
                Err(Refusal::Final(e)) => return Err(e),
                Err(Refusal::Retry(e)) if start.elapsed() + Duration::from_secs(1) > self.wait => {
                    return Err(e)
                }
                Err(Refusal::Retry(_)) => std::thread::sleep(Duration::from_secs(1)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CLIQUE: &str = "c0ffee.3";

    fn d() -> DomainRef {
        DomainRef {
            id: "u-1".into(),
            name: "train".into(),
            namespace: "team-a".into(),
        }
    }

    fn cd(uid: &str, nodes: serde_json::Value) -> DynamicObject {
        placed(
            uid,
            "Single",
            json!({"nodes": nodes, "clique": CLIQUE, "slot": 1}),
        )
    }

    fn placed(uid: &str, mode: &str, status: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "resource.graft.dev/v1alpha1",
            "kind": "ComputeDomain", "metadata": {"name": "train", "namespace": "team-a",
            "uid": uid}, "spec": {"numNodes": 1, "channel": {"allocationMode": mode,
            "resourceClaimTemplate": {"name": "t"}}}, "status": status}))
        .unwrap()
    }

    fn grant(channel: u32, all: bool) -> Grant {
        Grant {
            channel,
            clique: CLIQUE.into(),
            all,
        }
    }

    fn refused(r: Result<(), Refusal>) -> (bool, String) {
        match r {
            Ok(()) => panic!("granted"),
            Err(Refusal::Final(e)) => (true, e.to_string()),
            Err(Refusal::Retry(e)) => (false, e.to_string()),
        }
    }

    #[test]
    fn ready_only_when_listed_ready_here() {
        let ready =
            json!([{"name": "n1", "status": "Ready"}, {"name": "n2", "status": "NotReady"}]);
        assert!(ready_here(&d(), "n1", &cd("u-1", ready.clone())).is_ok());
        let e = ready_here(&d(), "n2", &cd("u-1", ready.clone())).unwrap_err();
        assert!(e.to_string().contains("NotReady"), "{e}");
        let e = ready_here(&d(), "n3", &cd("u-1", ready)).unwrap_err();
        assert!(e.to_string().contains("no IMEX daemon"), "{e}");
        // No status at all yet.
        assert!(ready_here(&d(), "n1", &placed("u-1", "Single", json!(null))).is_err());
    }

    #[test]
    fn single_mode_grants_the_slot_of_the_clique_only() {
        let single = cd("u-1", json!([]));
        assert!(bound_here(&d(), &grant(1, false), &single).is_ok());
        // Another slot's number: another domain's channel.
        let (fin, e) = refused(bound_here(&d(), &grant(2, false), &single));
        assert!(
            fin && e.contains("IMEX channel 2 is not the domain's"),
            "{e}"
        );
        assert!(e.contains("team-a/train") && e.contains("channel 1"), "{e}");
        // Its number, but another clique than the domain's.
        let other = Grant {
            clique: "beef.1".into(),
            ..grant(1, false)
        };
        let (fin, e) = refused(bound_here(&d(), &other, &single));
        assert!(fin && e.contains("beef.1") && e.contains(CLIQUE), "{e}");
        // Made again under the same name: not the claim's domain, for good.
        let (fin, e) = refused(bound_here(&d(), &grant(1, false), &cd("u-2", json!([]))));
        assert!(fin && e.contains("u-2"), "{e}");
        // Not placed yet: retried.
        let unplaced = placed("u-1", "Single", json!({"nodes": []}));
        let (fin, e) = refused(bound_here(&d(), &grant(1, false), &unplaced));
        assert!(!fin && e.contains("no clique and slot yet"), "{e}");
    }

    #[test]
    fn all_channels_only_for_a_domain_made_so() {
        let (fin, e) = refused(bound_here(&d(), &grant(0, true), &cd("u-1", json!([]))));
        assert!(fin && e.contains("allocationMode is Single"), "{e}");
        let all = placed("u-1", "All", json!({"clique": CLIQUE, "slot": 1}));
        for n in [0, 1, 2] {
            assert!(bound_here(&d(), &grant(n, true), &all).is_ok());
        }
        // Still of its clique only.
        let other = Grant {
            clique: "beef.1".into(),
            ..grant(0, true)
        };
        assert!(matches!(
            bound_here(&d(), &other, &all),
            Err(Refusal::Final(_))
        ));
    }

    #[test]
    fn no_gate_yet_is_retried() {
        let slot = GateSlot::new(true);
        assert!(slot.on() && !GateSlot::default().on());
        let e = slot.join(&d(), &grant(1, false)).unwrap_err();
        assert!(e.to_string().contains("team-a/train"), "{e}");
    }
}
