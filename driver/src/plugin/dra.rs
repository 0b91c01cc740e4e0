//! The DRA services on the driver's socket: `k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin` and
//! its v1beta1 twin, both answered by the same [`DriverCore`].

use std::collections::HashMap;
use std::sync::Arc;

use graft_proto::dra::{v1, v1beta1};
use tonic::{Request, Response, Status};

use crate::prepare::{CallError, ClaimId, DriverCore};

pub struct DraService {
    core: Arc<DriverCore>,
}

impl DraService {
    pub fn new(core: Arc<DriverCore>) -> Self {
        DraService { core }
    }
}

/// The kubelet's claim reference, the same in both service versions.
trait ClaimMsg {
    fn parts(&self) -> (&str, &str, &str);
}

impl ClaimMsg for v1::Claim {
    fn parts(&self) -> (&str, &str, &str) {
        (&self.namespace, &self.uid, &self.name)
    }
}

impl ClaimMsg for v1beta1::Claim {
    fn parts(&self) -> (&str, &str, &str) {
        (&self.namespace, &self.uid, &self.name)
    }
}

fn ids(claims: &[impl ClaimMsg]) -> Result<Vec<ClaimId>, Status> {
    claims
        .iter()
        .map(|c| {
            let (namespace, uid, name) = c.parts();
            if namespace.is_empty() || uid.is_empty() || name.is_empty() {
                return Err(Status::invalid_argument(format!(
                    "claim {namespace:?}/{name:?} ({uid:?}): namespace, uid and name are all required"
                )));
            }
            Ok(ClaimId {
                namespace: namespace.into(),
                uid: uid.into(),
                name: name.into(),
            })
        })
        .collect()
}

fn call_status(e: CallError) -> Status {
    match &e {
        CallError::Fetch { .. } | CallError::Local(_) => Status::unavailable(e.to_string()),
        _ => Status::failed_precondition(e.to_string()),
    }
}

/// The shared prepare: (claim uid → (devices, error)).
async fn prepare(
    core: &DriverCore,
    ids: Vec<ClaimId>,
) -> Result<HashMap<String, (Vec<v1::Device>, String)>, Status> {
    let outcomes = core.prepare(&ids).await.map_err(call_status)?;
    Ok(outcomes
        .into_iter()
        .map(|(uid, o)| {
            let entry = match o {
                Ok(devices) => (
                    devices
                        .into_iter()
                        .map(|d| v1::Device {
                            request_names: d.requests,
                            pool_name: d.pool,
                            device_name: d.device,
                            cdi_device_ids: Vec::new(),
                            share_id: d.share_id,
                        })
                        .collect(),
                    String::new(),
                ),
                Err(e) => (Vec::new(), e),
            };
            (uid, entry)
        })
        .collect())
}

async fn unprepare(core: &DriverCore, ids: Vec<ClaimId>) -> HashMap<String, String> {
    core.unprepare(&ids)
        .await
        .into_iter()
        .map(|(uid, o)| (uid, o.err().unwrap_or_default()))
        .collect()
}

#[tonic::async_trait]
impl v1::dra_plugin_server::DraPlugin for DraService {
    async fn node_prepare_resources(
        &self,
        req: Request<v1::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1::NodePrepareResourcesResponse>, Status> {
        let req = req.into_inner();
        let ids = ids(&req.claims)?;
        let claims = prepare(&self.core, ids)
            .await?
            .into_iter()
            .map(|(uid, (devices, error))| {
                (uid, v1::NodePrepareResourceResponse { devices, error })
            })
            .collect();
        Ok(Response::new(v1::NodePrepareResourcesResponse { claims }))
    }

    async fn node_unprepare_resources(
        &self,
        req: Request<v1::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1::NodeUnprepareResourcesResponse>, Status> {
        let req = req.into_inner();
        let ids = ids(&req.claims)?;
        let claims = unprepare(&self.core, ids)
            .await
            .into_iter()
            .map(|(uid, error)| (uid, v1::NodeUnprepareResourceResponse { error }))
            .collect();
        Ok(Response::new(v1::NodeUnprepareResourcesResponse { claims }))
    }
}

#[tonic::async_trait]
impl v1beta1::dra_plugin_server::DraPlugin for DraService {
    async fn node_prepare_resources(
        &self,
        req: Request<v1beta1::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1beta1::NodePrepareResourcesResponse>, Status> {
        let req = req.into_inner();
        let ids = ids(&req.claims)?;
        let claims = prepare(&self.core, ids)
            .await?
            .into_iter()
            .map(|(uid, (devices, error))| {
                // v1beta1 has no share id; everything else carries over.
                let devices = devices
                    .into_iter()
                    .map(|d| v1beta1::Device {
                        request_names: d.request_names,
                        pool_name: d.pool_name,
                        device_name: d.device_name,
                        cdi_device_ids: d.cdi_device_ids,
                    })
                    .collect();
                (uid, v1beta1::NodePrepareResourceResponse { devices, error })
            })
            .collect();
        Ok(Response::new(v1beta1::NodePrepareResourcesResponse {
            claims,
        }))
    }

    async fn node_unprepare_resources(
        &self,
        req: Request<v1beta1::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1beta1::NodeUnprepareResourcesResponse>, Status> {
        let req = req.into_inner();
        let ids = ids(&req.claims)?;
        let claims = unprepare(&self.core, ids)
            .await
            .into_iter()
            .map(|(uid, error)| (uid, v1beta1::NodeUnprepareResourceResponse { error }))
            .collect();
        Ok(Response::new(v1beta1::NodeUnprepareResourcesResponse {
            claims,
        }))
    }
}
