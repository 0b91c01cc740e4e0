//! Which container of a pod gets which of a claim's devices, in two halves: [`pod_use`]
//! reads from a Pod (the async edge does that) which containers reference the claim and
//! for which requests; [`pod_record`] turns that, and the claim's devices, into the
//! record's per-container lists (the core does that, with no Kubernetes types).
//!
//! A pod names the claim in `spec.resourceClaims` (directly, or through a template whose
//! generated name is in `status.resourceClaimStatuses`); a container takes part of it
//! through `resources.claims[]`: everything when no request is named, otherwise the
//! devices allocated for that request. Init containers count like any other. A claim the
//! scheduler made for a pod's extended resources (`resources.limits: {graft.dev/fuse: 1}`)
//! is named in the pod's `status.extendedResourceClaimStatus` instead, with the requests
//! of each container (`container-<i>-request-<j>`).

use graft_record::{ContainerRecord, PodRecord};
use k8s_openapi::api::core::v1::{Container, Pod};

/// How one pod uses a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodUse {
    /// The pod's UID.
    pub uid: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// Init containers first, then the others, each with what it asks of the claim.
    pub containers: Vec<ContainerUse>,
}

/// One container's references to the claim: request names, `None` for the whole claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUse {
    /// The container's name.
    pub name: String,
    /// The requests it names; `None` for the whole claim.
    pub requests: Vec<Option<String>>,
}

/// A device of the claim and the (base) request names it was allocated for.
pub struct ClaimDevice<'a> {
    /// The device's name.
    pub name: &'a str,
    /// The request names it was allocated for.
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

fn container_use(c: &Container, names: &[&str]) -> ContainerUse {
    let refs = c
        .resources
        .as_ref()
        .and_then(|r| r.claims.as_deref())
        .unwrap_or_default();
    ContainerUse {
        name: c.name.clone(),
        requests: refs
            .iter()
            .filter(|r| names.contains(&r.name.as_str()))
            .map(|r| r.request.clone().filter(|q| !q.is_empty()))
            .collect(),
    }
}

/// How `pod` uses the claim called `claim_name`, or `None` when it does not reference it.
pub fn pod_use(pod: &Pod, claim_name: &str) -> Option<PodUse> {
    if let Some(u) = extended_resource_use(pod, claim_name) {
        return Some(u);
    }
    let names = pod_claim_names(pod, claim_name);
    if names.is_empty() {
        return None;
    }
    pod_use_with(pod, |c| container_use(c, &names))
}

/// The pod with `usage` of each container, init containers first.
fn pod_use_with(pod: &Pod, usage: impl Fn(&Container) -> ContainerUse) -> Option<PodUse> {
    let spec = pod.spec.as_ref()?;
    Some(PodUse {
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        containers: spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
            .map(usage)
            .collect(),
    })
}

/// How `pod` uses the claim the scheduler made for its extended resources (DeviceClass
/// `extendedResourceName`; `resources.limits: {graft.dev/fuse: 1}`), if `claim_name` is that
/// claim: the pod's status maps each container to the claim's requests for it. The pod
/// spec names no such claim.
fn extended_resource_use(pod: &Pod, claim_name: &str) -> Option<PodUse> {
    let ext = pod
        .status
        .as_ref()?
        .extended_resource_claim_status
        .as_ref()
        .filter(|e| e.resource_claim_name == claim_name)?;
    pod_use_with(pod, |c| ContainerUse {
        name: c.name.clone(),
        requests: ext
            .request_mappings
            .iter()
            .filter(|m| m.container_name == c.name && !m.request_name.is_empty())
            .map(|m| Some(m.request_name.clone()))
            .collect(),
    })
}

/// The pod's share of the claim's `devices`: each container that references the claim,
/// with the devices allocated for the requests it names (all of them for the whole claim).
pub fn pod_record(pod: &PodUse, devices: &[ClaimDevice<'_>]) -> PodRecord {
    let containers = pod
        .containers
        .iter()
        .filter_map(|c| {
            let mut devs: Vec<String> = Vec::new();
            for d in devices {
                let wanted = c.requests.iter().any(|r| match r {
                    None => true,
                    Some(req) => d.requests.is_empty() || d.requests.iter().any(|x| x == req),
                });
                if wanted && !devs.iter().any(|n| n == d.name) {
                    devs.push(d.name.to_string());
                }
            }
            (!devs.is_empty()).then(|| ContainerRecord {
                name: c.name.clone(),
                devices: devs,
            })
        })
        .collect();
    PodRecord {
        uid: pod.uid.clone(),
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        containers,
    }
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
        let rec = pod_record(&pod_use(&p, "p-gpus-x1").unwrap(), &devices);
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
        assert!(pod_use(&p, "someone-else").is_none());
    }

    /// A claim the scheduler made for `resources.limits: {graft.dev/fuse: 1}`: no
    /// resourceClaims in the spec, the mapping in the status, one request per container.
    #[test]
    fn extended_resource_claim_from_the_status() {
        let p = pod(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "pod-1"},
            "spec": {"containers": [
                {"name": "app", "resources": {"limits": {"graft.dev/fuse": "1"}}},
                {"name": "plain"},
                {"name": "also", "resources": {"limits": {"graft.dev/fuse": "1"}}}
            ]},
            "status": {"extendedResourceClaimStatus": {
                "resourceClaimName": "p-extended-resources-x7k2",
                "requestMappings": [
                    {"containerName": "app", "resourceName": "graft.dev/fuse",
                     "requestName": "container-0-request-0"},
                    {"containerName": "also", "resourceName": "graft.dev/fuse",
                     "requestName": "container-2-request-0"}
                ]
            }}
        }));
        let (r0, r2) = (
            vec!["container-0-request-0".to_string()],
            vec!["container-2-request-0".to_string()],
        );
        let devices = [
            ClaimDevice {
                name: "fuse",
                requests: &r0,
            },
            ClaimDevice {
                name: "fuse-b",
                requests: &r2,
            },
        ];
        let u = pod_use(&p, "p-extended-resources-x7k2").unwrap();
        let rec = pod_record(&u, &devices);
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
        assert_eq!(got, vec![("app", vec!["fuse"]), ("also", vec!["fuse-b"])]);
        assert!(pod_use(&p, "another-claim").is_none());
    }

    #[test]
    fn subrequests_are_stripped() {
        assert_eq!(base_request("gpu/large"), "gpu");
        assert_eq!(base_request("gpu"), "gpu");
    }
}
