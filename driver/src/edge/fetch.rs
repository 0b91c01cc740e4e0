//! Reading the claims of a call and the pods they are reserved for from the API server.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::Api;

use super::errors::CallError;
use crate::claims::input::ClaimInput;
use crate::mapping::pod_use;
use crate::model::{Allocated, ClaimId};

/// Reads the claims and their pods: this driver's (`driver_name`) results only. Any claim
/// that is missing, replaced or not allocated fails the whole call.
pub async fn fetch(
    client: &kube::Client,
    driver_name: &str,
    ids: &[ClaimId],
) -> Result<Vec<ClaimInput>, CallError> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &id.namespace);
        let claim = claims
            .get_opt(&id.name)
            .await
            .map_err(|source| CallError::Fetch {
                claim: id.to_string(),
                source,
            })?
            .ok_or_else(|| CallError::NotFound {
                claim: id.to_string(),
            })?;
        let found = claim.metadata.uid.clone().unwrap_or_default();
        if found != id.uid {
            return Err(CallError::Replaced {
                claim: id.to_string(),
                found,
                expected: id.uid.clone(),
            });
        }
        let status = claim.status.as_ref();
        let Some(alloc) = status.and_then(|s| s.allocation.as_ref()) else {
            return Err(CallError::NotAllocated {
                claim: id.to_string(),
            });
        };
        let devices = alloc.devices.as_ref();
        let results = devices
            .map(|d| {
                d.results
                    .iter()
                    .flatten()
                    .filter(|r| r.driver == driver_name)
                    .map(|r| Allocated {
                        request: r.request.clone(),
                        pool: r.pool.clone(),
                        device: r.device.clone(),
                        share_id: r.share_id.clone(),
                        admin_access: r.admin_access.unwrap_or(false),
                        consumed: r
                            .consumed_capacity
                            .iter()
                            .flatten()
                            .map(|(k, q)| (k.clone(), q.0.clone()))
                            .collect(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let configs = devices.and_then(|d| d.config.clone()).unwrap_or_default();
        let pods_api: Api<Pod> = Api::namespaced(client.clone(), &id.namespace);
        let mut pods = Vec::new();
        let mut pod_errors = Vec::new();
        for r in status
            .and_then(|s| s.reserved_for.as_deref())
            .unwrap_or_default()
        {
            if r.resource != "pods" || r.api_group.as_deref().is_some_and(|g| !g.is_empty()) {
                continue;
            }
            match pods_api.get_opt(&r.name).await {
                Ok(Some(p)) if p.metadata.uid.as_deref() == Some(r.uid.as_str()) => {
                    pods.extend(pod_use(&p, &id.name))
                }
                // Gone or replaced: it will never run a container with this claim.
                Ok(_) => tracing::debug!(pod = r.name, "reserved pod not found; skipped"),
                Err(e) => pod_errors.push(format!("pod {}/{}: {e}", id.namespace, r.name)),
            }
        }
        out.push(ClaimInput {
            id: id.clone(),
            results,
            configs,
            pods,
            pod_errors,
        });
    }
    Ok(out)
}
