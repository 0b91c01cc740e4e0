//! Which container of a pod gets which of a claim's devices.
//!
//! A pod names the claim in `spec.resourceClaims` (directly, or through a template whose
//! generated name is in `status.resourceClaimStatuses`); a container takes part of it
//! through `resources.claims[]`: everything when no request is named, otherwise the
//! devices allocated for that request. Init containers count like any other.

use graft_record::{ContainerRecord, PodRecord};
use k8s_openapi::api::core::v1::{Container, Pod};

/// A device of the claim and the (base) request names it was allocated for.
pub struct ClaimDevice<'a> {
    pub name: &'a str,
    pub requests: &'a [String],
}

/// `main/sub` is allocated for request `main`.
pub fn base_request(request: &str) -> &str {
    request.split_once('/').map_or(request, |(main, _)| main)
}

/// The pod-level names under which `pod` refers to the claim called `claim_name`.
fn pod_claim_names<'p>(pod: &'p Pod, claim_name: &str) -> Vec<&'p str> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_deref())
        .unwrap_or_default();
    spec.resource_claims
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|rc| {
            if let Some(direct) = &rc.resource_claim_name {
                return direct == claim_name;
            }
            rc.resource_claim_template_name.is_some()
                && statuses.iter().any(|s| {
                    s.name == rc.name && s.resource_claim_name.as_deref() == Some(claim_name)
                })
        })
        .map(|rc| rc.name.as_str())
        .collect()
}

fn container_devices(c: &Container, names: &[&str], devices: &[ClaimDevice<'_>]) -> Vec<String> {
    let refs = c
        .resources
        .as_ref()
        .and_then(|r| r.claims.as_deref())
        .unwrap_or_default();
    let mut out: Vec<String> = Vec::new();
    for d in devices {
        let wanted = refs.iter().any(|r| {
            names.contains(&r.name.as_str())
                && match r.request.as_deref() {
                    None | Some("") => true,
                    Some(req) => d.requests.is_empty() || d.requests.iter().any(|x| x == req),
                }
        });
        if wanted && !out.iter().any(|n| n == d.name) {
            out.push(d.name.to_string());
        }
    }
    out
}

/// The pod's share of the claim, or `None` when the pod does not reference it.
pub fn pod_record(pod: &Pod, claim_name: &str, devices: &[ClaimDevice<'_>]) -> Option<PodRecord> {
    let names = pod_claim_names(pod, claim_name);
    if names.is_empty() {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .filter_map(|c| {
            let devs = container_devices(c, &names, devices);
            (!devs.is_empty()).then(|| ContainerRecord {
                name: c.name.clone(),
                devices: devs,
            })
        })
        .collect();
    Some(PodRecord {
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        containers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn per_container_by_request_with_template_and_init() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "pod-1"},
            "spec": {
                "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "tmpl"},
                                   {"name": "other", "resourceClaimName": "unrelated"}],
                "initContainers": [{"name": "init", "resources": {"claims": [{"name": "gpus", "request": "a"}]}}],
                "containers": [
                    {"name": "both", "resources": {"claims": [{"name": "gpus"}]}},
                    {"name": "b-only", "resources": {"claims": [{"name": "gpus", "request": "b"}]}},
                    {"name": "none", "resources": {"claims": [{"name": "other"}]}},
                    {"name": "plain"}
                ]
            },
            "status": {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "p-gpus-x1"}]}
        }));
        let (ra, rb) = (vec!["a".to_string()], vec!["b".to_string()]);
        let devices = [
            ClaimDevice {
                name: "d0",
                requests: &ra,
            },
            ClaimDevice {
                name: "d1",
                requests: &rb,
            },
        ];
        let rec = pod_record(&p, "p-gpus-x1", &devices).unwrap();
        let got: Vec<(&str, Vec<&str>)> = rec
            .containers
            .iter()
            .map(|c| {
                (
                    c.name.as_str(),
                    c.devices.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("init", vec!["d0"]),
                ("both", vec!["d0", "d1"]),
                ("b-only", vec!["d1"])
            ]
        );
        assert!(pod_record(&p, "someone-else", &devices).is_none());
    }

    #[test]
    fn subrequests_are_stripped() {
        assert_eq!(base_request("gpu/large"), "gpu");
        assert_eq!(base_request("gpu"), "gpu");
    }
}
