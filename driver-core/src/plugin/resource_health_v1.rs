//! `v1.DRAResourceHealth`: the same stream as v1alpha1 (identical messages, field for
//! field), which kubelets that know v1 pick over v1alpha1 when both are advertised.

use graft_proto::dra_health::{v1, v1alpha1};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::resource_health::HealthService;

/// The v1 service over the same feed.
pub struct HealthServiceV1(pub HealthService);

/// A v1alpha1 list as v1: the same fields and numbers.
pub fn to_v1(m: v1alpha1::NodeWatchResourcesResponse) -> v1::NodeWatchResourcesResponse {
    let devices = m
        .devices
        .into_iter()
        .map(|d| v1::DeviceHealth {
            device: d.device.map(|id| v1::DeviceIdentifier {
                pool_name: id.pool_name,
                device_name: id.device_name,
            }),
            health: d.health,
            last_updated_time: d.last_updated_time,
            health_check_timeout_seconds: d.health_check_timeout_seconds,
            message: d.message,
        })
        .collect();
    v1::NodeWatchResourcesResponse { devices }
}

#[tonic::async_trait]
impl v1::dra_resource_health_server::DraResourceHealth for HealthServiceV1 {
    type NodeWatchResourcesStream = ReceiverStream<Result<v1::NodeWatchResourcesResponse, Status>>;

    async fn node_watch_resources(
        &self,
        _request: Request<v1::NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        Ok(Response::new(self.0.open(to_v1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_carries_over() {
        let a = v1alpha1::NodeWatchResourcesResponse {
            devices: vec![v1alpha1::DeviceHealth {
                device: Some(v1alpha1::DeviceIdentifier {
                    pool_name: "n".into(),
                    device_name: "gpu-0".into(),
                }),
                health: v1alpha1::HealthStatus::Unhealthy.into(),
                last_updated_time: 7,
                health_check_timeout_seconds: 60,
                message: "Unhealthy: fell off the bus (xid-79)".into(),
            }],
        };
        let b = to_v1(a);
        let d = &b.devices[0];
        assert_eq!(d.health(), v1::HealthStatus::Unhealthy);
        assert_eq!(
            (d.last_updated_time, d.health_check_timeout_seconds),
            (7, 60)
        );
        assert_eq!(d.message, "Unhealthy: fell off the bus (xid-79)");
        assert_eq!(
            d.device.as_ref().map(|i| i.device_name.as_str()),
            Some("gpu-0")
        );
    }
}
