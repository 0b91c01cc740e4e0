//! `PrepareFailed` on a ResourceClaim whose NodePrepareResources failed: the error graft
//! returned to the kubelet, on the claim, for `kubectl describe resourceclaim`.
//!
//! Not on the claim's pods: the kubelet already puts the same text on each of them
//! (`FailedPrepareDynamicResources`), so a second copy would only be noise.

use kube::runtime::events::{Event, EventType};

use super::post::{claim_ref, Posting};
use crate::model::ClaimId;

/// The Event reason of a prepare that failed.
pub const PREPARE_FAILED: &str = "PrepareFailed";

/// The Event for a failed prepare of `claim` on `node`; `error` is what the kubelet got.
pub fn prepare_failed(claim: &ClaimId, node: &str, error: &str) -> Posting {
    let ev = Event {
        type_: EventType::Warning,
        reason: PREPARE_FAILED.into(),
        note: Some(format!("graft-driver on node {node}: {error}")),
        action: "PrepareResources".into(),
        secondary: None,
    };
    (ev, claim_ref(&claim.namespace, &claim.name, &claim.uid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_claim_node_and_error() {
        let id = ClaimId {
            namespace: "ns".into(),
            name: "c".into(),
            uid: "u-1".into(),
        };
        let (ev, r) = prepare_failed(&id, "node-a", "device gpu-0 (request r) is not present");
        assert_eq!(ev.type_, EventType::Warning);
        assert_eq!(ev.reason, "PrepareFailed");
        assert_eq!(
            ev.note.as_deref(),
            Some("graft-driver on node node-a: device gpu-0 (request r) is not present")
        );
        assert_eq!(r.kind.as_deref(), Some("ResourceClaim"));
        assert_eq!(r.api_version.as_deref(), Some("resource.k8s.io/v1"));
        assert_eq!(
            (r.namespace.as_deref(), r.name.as_deref(), r.uid.as_deref()),
            (Some("ns"), Some("c"), Some("u-1"))
        );
    }
}
