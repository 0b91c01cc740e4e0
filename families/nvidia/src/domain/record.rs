//! The controller's record of a domain as the node reads it: a ConfigMap `imex-<uid>` in
//! graft's namespace, which tenants cannot write (the controller's `record` module writes
//! it). The domain's `status` repeats it for people; a node decides from the record only,
//! since whoever may write a ComputeDomain may also write its status.

use graft_api::compute_domain::record::{CLIQUE, NAME, NAMESPACE, NODES, SLOT};
use graft_api::compute_domain::{ComputeDomainStatus, NodeStatus};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DynamicObject;

use super::refusal::{DomainRef, Refusal};

/// The controller's record of domain `uid` in graft's namespace (the controller's
/// `record` module writes it).
pub use graft_api::compute_domain::daemon_name as record_name;

/// `cd` with its status replaced by what the controller's `record` says (its clique, slot
/// and members), so that nothing below reads the status a tenant may write. No record yet
/// (a domain not placed yet) is retried; one of another domain is refused.
pub fn with_record(
    d: &DomainRef,
    mut cd: DynamicObject,
    record: Option<&ConfigMap>,
) -> Result<DynamicObject, Refusal> {
    let Some(data) = record.and_then(|r| r.data.as_ref()) else {
        return Err(Refusal::Retry(d.refuse(
            "its controller has not placed it yet (no record in graft's namespace); retried",
        )));
    };
    let field = |k: &str| data.get(k).map(String::as_str).unwrap_or_default();
    if (field(NAMESPACE), field(NAME)) != (d.namespace.as_str(), d.name.as_str()) {
        return Err(Refusal::Final(d.refuse(format!(
            "the controller's record of uid {} is of {}/{}",
            d.id,
            field(NAMESPACE),
            field(NAME)
        ))));
    }
    let nodes: Vec<NodeStatus> =
        serde_json::from_str(data.get(NODES).map_or("[]", String::as_str)).unwrap_or_default();
    let mut status = ComputeDomainStatus {
        nodes,
        ..ComputeDomainStatus::default()
    };
    if let (Some(c), Ok(slot)) = (data.get(CLIQUE), field(SLOT).parse::<u32>()) {
        status.clique = Some(c.clone());
        status.slot = Some(slot);
    }
    // Plain structs of strings and numbers always serialize.
    cd.data["status"] = serde_json::to_value(status).unwrap_or_default();
    Ok(cd)
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

    fn cd(status: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "resource.graft.dev/v1alpha1",
            "kind": "ComputeDomain", "metadata": {"name": "train", "namespace": "team-a",
            "uid": "u-1"}, "status": status}))
        .unwrap()
    }

    fn record(data: serde_json::Value) -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": "imex-u-1"}, "data": data})).unwrap()
    }

    #[test]
    fn the_record_replaces_whatever_the_status_says() {
        let forged =
            json!({"clique": "c.1", "slot": 2, "nodes": [{"name": "n", "status": "Ready"}]});
        let r = record(
            json!({"namespace": "team-a", "name": "train", "clique": "c.1",
            "slot": "1", "nodes": "[{\"name\":\"n\",\"status\":\"NotReady\"}]"}),
        );
        let got = with_record(&d(), cd(forged.clone()), Some(&r)).unwrap();
        assert_eq!(got.data["status"]["slot"], json!(1));
        assert_eq!(got.data["status"]["nodes"][0]["status"], json!("NotReady"));
        // No record yet: retried, whatever the status says.
        assert!(matches!(
            with_record(&d(), cd(forged.clone()), None),
            Err(Refusal::Retry(_))
        ));
        // Placed no more (its slot released): no clique or slot.
        let r = record(json!({"namespace": "team-a", "name": "train", "nodes": "[]"}));
        let got = with_record(&d(), cd(forged.clone()), Some(&r)).unwrap();
        assert!(got.data["status"].get("slot").is_none());
        // Another domain's record under this uid: refused.
        let r = record(json!({"namespace": "team-b", "name": "train"}));
        assert!(matches!(
            with_record(&d(), cd(forged), Some(&r)),
            Err(Refusal::Final(_))
        ));
        assert_eq!(record_name("u-1"), "imex-u-1");
    }
}
