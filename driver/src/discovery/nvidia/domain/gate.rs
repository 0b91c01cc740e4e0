//! The gate a ComputeDomain's workload channel passes before it is handed out: this node
//! labelled `resource.graft.dev/computeDomain.<uid>=true` (so the domain's IMEX daemon is
//! scheduled here), and the domain's status listing this node Ready. Until then prepare
//! fails with [`SetupError::ComputeDomain`] and the kubelet retries it: a container that
//! got its channel before the IMEX domain formed would fail at its first import.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};

use crate::claims::setup_port::SetupError;

/// The node label that puts a node in a domain (one key per domain, so that a node can
/// host two); the controller's `objects::node_label` writes the same.
pub fn node_label(domain_id: &str) -> String {
    format!("resource.graft.dev/computeDomain.{domain_id}")
}

/// A domain as a claim's configuration names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainRef {
    /// Its uid.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
}

impl DomainRef {
    fn refuse(&self, reason: impl Into<String>) -> SetupError {
        SetupError::ComputeDomain {
            domain: format!("{}/{}", self.namespace, self.name),
            reason: reason.into(),
        }
    }
}

/// Labels the node for a domain and tells whether the domain is Ready on it.
pub trait DomainGate: Send + Sync {
    /// Ok once the node is labelled and the domain lists it Ready; an error the kubelet
    /// retries otherwise.
    fn join(&self, domain: &DomainRef) -> Result<(), SetupError>;
}

/// Set once graft-driver has its API client; a prepare before that is retried.
#[derive(Clone, Default)]
pub struct GateSlot(Arc<std::sync::OnceLock<Arc<dyn DomainGate>>>);

impl GateSlot {
    /// Puts the gate in; a second call is ignored.
    pub fn set(&self, gate: Arc<dyn DomainGate>) {
        let _ = self.0.set(gate);
    }

    /// The gate's answer, or a retryable error when there is none yet.
    pub fn join(&self, domain: &DomainRef) -> Result<(), SetupError> {
        match self.0.get() {
            Some(g) => g.join(domain),
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
    /// The runtime the calls run on (prepare runs on a blocking thread).
    pub runtime: tokio::runtime::Handle,
    /// How long the calls of one prepare may take.
    pub timeout: Duration,
}

fn domains_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk("resource.graft.dev", "v1alpha1", "ComputeDomain");
    ApiResource::from_gvk_with_plural(&gvk, "computedomains")
}

impl KubeGate {
    async fn join_async(&self, d: &DomainRef) -> Result<(), SetupError> {
        let api_err = |what: &str, e: kube::Error| d.refuse(format!("{what}: {e}"));
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
        let domains: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &d.namespace, &domains_resource());
        let cd = domains
            .get(&d.name)
            .await
            .map_err(|e| api_err("reading the ComputeDomain", e))?;
        ready_here(d, &self.node, &cd)
    }
}

/// Whether `cd` is the domain `d` names and its status lists `node` Ready.
pub fn ready_here(d: &DomainRef, node: &str, cd: &DynamicObject) -> Result<(), SetupError> {
    if cd.metadata.uid.as_deref() != Some(d.id.as_str()) {
        return Err(d.refuse(format!(
            "its uid is {:?}, not the {:?} the claim was made for (deleted and made again?)",
            cd.metadata.uid.as_deref().unwrap_or(""),
            d.id
        )));
    }
    let members = cd.data["status"]["nodes"].as_array();
    let mine = members
        .into_iter()
        .flatten()
        .find(|n| n["name"].as_str() == Some(node));
    match mine.and_then(|n| n["status"].as_str()) {
        Some("Ready") => Ok(()),
        Some(other) => Err(d.refuse(format!(
            "not ready on node {node} yet (its IMEX daemon here is {other}); retried"
        ))),
        None => Err(d.refuse(format!(
            "not ready on node {node} yet (no IMEX daemon of the domain here yet); retried"
        ))),
    }
}

impl DomainGate for KubeGate {
    fn join(&self, d: &DomainRef) -> Result<(), SetupError> {
        let call = tokio::time::timeout(self.timeout, self.join_async(d));
        match self.runtime.block_on(call) {
            Ok(r) => r,
            Err(_) => Err(d.refuse(format!(
                "the API server did not answer within {:?}",
                self.timeout
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn d() -> DomainRef {
        DomainRef {
            id: "u-1".into(),
            name: "train".into(),
            namespace: "team-a".into(),
        }
    }

    fn cd(uid: &str, nodes: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "resource.graft.dev/v1alpha1",
            "kind": "ComputeDomain", "metadata": {"name": "train", "namespace": "team-a",
            "uid": uid}, "status": {"nodes": nodes}}))
        .unwrap()
    }

    #[test]
    fn ready_only_when_listed_ready_here_and_the_same_domain() {
        let ready =
            json!([{"name": "n1", "status": "Ready"}, {"name": "n2", "status": "NotReady"}]);
        assert!(ready_here(&d(), "n1", &cd("u-1", ready.clone())).is_ok());
        let e = ready_here(&d(), "n2", &cd("u-1", ready.clone())).unwrap_err();
        assert!(e.to_string().contains("NotReady"), "{e}");
        let e = ready_here(&d(), "n3", &cd("u-1", ready.clone())).unwrap_err();
        assert!(e.to_string().contains("no IMEX daemon"), "{e}");
        // Made again under the same name: not the claim's domain.
        let e = ready_here(&d(), "n1", &cd("u-2", ready)).unwrap_err();
        assert!(e.to_string().contains("u-2"), "{e}");
        // No status at all yet.
        assert!(ready_here(&d(), "n1", &cd("u-1", json!(null))).is_err());
    }

    #[test]
    fn no_gate_yet_is_retried() {
        let e = GateSlot::default().join(&d()).unwrap_err();
        assert!(e.to_string().contains("team-a/train"), "{e}");
    }
}
