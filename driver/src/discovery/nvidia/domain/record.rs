//! The controller's record of a domain as the node reads it: a ConfigMap `imex-<uid>` in
//! graft's namespace, which tenants cannot write (the controller's `record` module writes
//! it). The domain's `status` repeats it for people; a node decides from the record only,
//! since whoever may write a ComputeDomain may also write its status.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::DynamicObject;

use super::refusal::{DomainRef, Refusal};

/// The controller's record of domain `uid` in graft's namespace (the controller's
/// `record` module writes it).
pub fn record_name(uid: &str) -> String {
    format!("imex-{uid}")
}

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
    if (field("namespace"), field("name")) != (d.namespace.as_str(), d.name.as_str()) {
        return Err(Refusal::Final(d.refuse(format!(
            "the controller's record of uid {} is of {}/{}",
            d.id,
            field("namespace"),
            field("name")
        ))));
    }
    let nodes: serde_json::Value =
        serde_json::from_str(data.get("nodes").map_or("[]", String::as_str))
            .unwrap_or_else(|_| serde_json::json!([]));
    let mut status = serde_json::json!({ "nodes": nodes });
    if let (Some(c), Some(slot)) = (data.get("clique"), field("slot").parse::<u64>().ok()) {
        status["clique"] = serde_json::json!(c);
        status["slot"] = serde_json::json!(slot);
    }
    cd.data["status"] = status;
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
