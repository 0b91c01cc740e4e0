//! The DRA services on the driver's socket: `k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin` and
//! its v1beta1 twin, both answered by the same [`Edge`].

use std::collections::HashMap;
use std::sync::Arc;

use graft_proto::dra::{v1, v1beta1};
use tonic::{Request, Response, Status};

use crate::edge::{CallError, Edge};
use crate::model::ClaimId;

/// The DRA services, both versions, over one [`Edge`].
pub struct DraService {
    edge: Arc<Edge>,
}

impl DraService {
    /// Serves the kubelet's calls through `edge`.
    pub fn new(edge: Arc<Edge>) -> Self {
        DraService { edge }
    }
}

/// The kubelet's claim reference, the same in both service versions.
trait ClaimMsg {
    fn parts(&self) -> (&str, &str, &str);
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
        CallError::Fetch { .. } | CallError::Local(_) => Status::unavailable(e.for_tenant()),
        _ => Status::failed_precondition(e.for_tenant()),
    }
}

/// The shared prepare: (claim uid → (devices, error)).
async fn prepare(
    edge: &Edge,
    ids: Vec<ClaimId>,
) -> Result<HashMap<String, (Vec<v1::Device>, String)>, Status> {
    let outcomes = edge.prepare(&ids).await.map_err(call_status)?;
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
                Err(e) => (Vec::new(), e.0),
            };
            (uid, entry)
        })
        .collect())
}

async fn unprepare(edge: &Edge, ids: Vec<ClaimId>) -> HashMap<String, String> {
    edge.unprepare(&ids)
        .await
        .into_iter()
        .map(|(uid, o)| (uid, o.err().map(|e| e.0).unwrap_or_default()))
        .collect()
}

/// One kubelet DRA service version: its claim reference and its request/response plumbing,
/// the same in every version but for the device message (`$device` turns the v1 device
/// into this version's).
macro_rules! dra_service {
    ($v:ident, $device:expr) => {
        impl ClaimMsg for $v::Claim {
            fn parts(&self) -> (&str, &str, &str) {
                (&self.namespace, &self.uid, &self.name)
            }
        }

        #[tonic::async_trait]
        impl $v::dra_plugin_server::DraPlugin for DraService {
            async fn node_prepare_resources(
                &self,
                req: Request<$v::NodePrepareResourcesRequest>,
            ) -> Result<Response<$v::NodePrepareResourcesResponse>, Status> {
                let ids = ids(&req.into_inner().claims)?;
                let device: fn(v1::Device) -> $v::Device = $device;
                let claims = prepare(&self.edge, ids)
                    .await?
                    .into_iter()
                    .map(|(uid, (devices, error))| {
                        let devices = devices.into_iter().map(device).collect();
                        (uid, $v::NodePrepareResourceResponse { devices, error })
                    })
                    .collect();
                Ok(Response::new($v::NodePrepareResourcesResponse { claims }))
            }

            async fn node_unprepare_resources(
                &self,
                req: Request<$v::NodeUnprepareResourcesRequest>,
            ) -> Result<Response<$v::NodeUnprepareResourcesResponse>, Status> {
                let ids = ids(&req.into_inner().claims)?;
                let claims = unprepare(&self.edge, ids)
                    .await
                    .into_iter()
                    .map(|(uid, error)| (uid, $v::NodeUnprepareResourceResponse { error }))
                    .collect();
                Ok(Response::new($v::NodeUnprepareResourcesResponse { claims }))
            }
        }
    };
}

dra_service!(v1, |d| d);
// v1beta1 has no share id; everything else carries over.
dra_service!(v1beta1, |d| v1beta1::Device {
    request_names: d.request_names,
    pool_name: d.pool_name,
    device_name: d.device_name,
    cdi_device_ids: d.cdi_device_ids,
});
