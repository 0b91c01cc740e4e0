//! The kubelet's DRA resource health stream (`v1alpha1.DRAResourceHealth`, and `v1` in
//! [`super::resource_health_v1`]; feature gate
//! `ResourceHealthStatus`) on the DRA socket: the kubelet keeps one stream open per plugin
//! and shows what it receives in `status.containerStatuses[].allocatedResourcesStatus`.
//!
//! Every message carries every published device. The kubelet turns an entry Unknown once
//! it has not been repeated within its timeout, so the full list goes out on every change
//! and on a timer in between.

use std::time::{Duration, SystemTime};

use graft_proto::dra_health::v1alpha1::{
    dra_resource_health_server::DraResourceHealth, DeviceHealth, DeviceIdentifier, HealthStatus,
    NodeWatchResourcesRequest, NodeWatchResourcesResponse,
};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::health::HealthReport;
use crate::model::Device;

/// The longest the kubelet goes without a fresh copy of the list.
pub const RESEND: Duration = Duration::from_secs(10);

/// How long the kubelet trusts an entry: well above [`RESEND`] so that a late resend (a
/// busy node, a slow consumer) does not flap devices to Unknown.
pub const HEALTH_TIMEOUT_SECONDS: i64 = 60;

/// Each message is the whole state, so a slow reader gains nothing from a queue of stale
/// ones: the producer waits for room instead.
const QUEUE: usize = 1;

/// What the health stream reports: the node's pool (the node name), the published inventory and the health report.
#[derive(Clone)]
pub struct HealthFeed {
    /// The node's pool (the node name).
    pub pool: String,
    /// The devices published.
    pub inventory: watch::Receiver<Vec<Device>>,
    /// Their health.
    pub health: watch::Receiver<HealthReport>,
}

/// The full list as the kubelet wants it: each inventory device, unhealthy or healthy
/// (a degraded device still works, so it is healthy here).
pub fn snapshot(
    pool: &str,
    devices: &[Device],
    report: &HealthReport,
    now: SystemTime,
) -> NodeWatchResourcesResponse {
    let now = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let devices = devices
        .iter()
        .map(|d| {
            let health = if report.is_unhealthy(&d.name) {
                HealthStatus::Unhealthy
            } else {
                HealthStatus::Healthy
            };
            DeviceHealth {
                device: Some(DeviceIdentifier {
                    pool_name: pool.to_owned(),
                    device_name: d.name.clone(),
                }),
                health: health.into(),
                last_updated_time: now,
                health_check_timeout_seconds: HEALTH_TIMEOUT_SECONDS,
                message: report.get(&d.name).map(message).unwrap_or_default(),
            }
        })
        .collect();
    NodeWatchResourcesResponse { devices }
}

/// The longest message the kubelet keeps (it cuts longer ones).
pub const MESSAGE_MAX: usize = 1024;

/// Why a device is in its condition, as pod status shows it: graft's reason and message
/// (a degraded device is Healthy for the kubelet, and still says why).
fn message(h: &crate::health::DeviceHealth) -> String {
    let text = format!("{:?}: {} ({})", h.condition, h.message, h.reason);
    if text.len() <= MESSAGE_MAX {
        return text;
    }
    let mut cut = MESSAGE_MAX - 3;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &text[..cut])
}

/// Answers `NodeWatchResources` from a [`HealthFeed`].
pub struct HealthService {
    feed: HealthFeed,
    stop: watch::Receiver<bool>,
}

impl HealthService {
    /// `stop` turning true ends every open stream, so that a graceful server shutdown is
    /// not held up by the kubelet's never-ending call.
    pub fn new(feed: HealthFeed, stop: watch::Receiver<bool>) -> Self {
        HealthService { feed, stop }
    }
}

type Item = Result<NodeWatchResourcesResponse, Status>;

impl HealthService {
    /// A stream of full lists, each made into the version's message by `to`.
    pub fn open<T: Send + 'static>(
        &self,
        to: fn(NodeWatchResourcesResponse) -> T,
    ) -> ReceiverStream<Result<T, Status>> {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(produce(self.feed.clone(), self.stop.clone(), tx, to));
        tracing::debug!("health stream opened");
        ReceiverStream::new(rx)
    }
}

#[tonic::async_trait]
impl DraResourceHealth for HealthService {
    type NodeWatchResourcesStream = ReceiverStream<Item>;

    async fn node_watch_resources(
        &self,
        _request: Request<NodeWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
        Ok(Response::new(self.open(|m| m)))
    }
}

/// Sends the list now, on every change of either input and at least every [`RESEND`];
/// returns when the client is gone (its end of the channel dropped) or on `stop`.
async fn produce<T>(
    mut feed: HealthFeed,
    mut stop: watch::Receiver<bool>,
    tx: mpsc::Sender<Result<T, Status>>,
    to: fn(NodeWatchResourcesResponse) -> T,
) {
    // A closed input (its sender dropped) keeps its last value but must not be polled:
    // `changed` would return at once, forever.
    let (mut inventory_open, mut health_open, mut stop_open) = (true, true, true);
    loop {
        if *stop.borrow_and_update() {
            break;
        }
        // The borrows are released before the await: a held one blocks the senders.
        let message = {
            let devices = feed.inventory.borrow_and_update();
            let report = feed.health.borrow_and_update();
            to(snapshot(&feed.pool, &devices, &report, SystemTime::now()))
        };
        let sent = tokio::select! {
            r = tx.send(Ok(message)) => r.is_ok(),
            r = stop.changed(), if stop_open => {
                stop_open = r.is_ok();
                continue;
            }
        };
        if !sent {
            break;
        }
        let resend = tokio::time::sleep(RESEND);
        tokio::pin!(resend);
        tokio::select! {
            () = tx.closed() => break,
            () = &mut resend => {}
            r = feed.inventory.changed(), if inventory_open => inventory_open = r.is_ok(),
            r = feed.health.changed(), if health_open => health_open = r.is_ok(),
            r = stop.changed(), if stop_open => stop_open = r.is_ok(),
        }
    }
    tracing::debug!("health stream closed");
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use graft_proto::dra_health::v1alpha1::dra_resource_health_client::DraResourceHealthClient;
    use graft_proto::dra_health::v1alpha1::dra_resource_health_server::DraResourceHealthServer;
    use tokio_stream::wrappers::UnixListenerStream;

    use super::*;
    use crate::health::{Condition, DeviceHealth as Health};
    use crate::model::Kind;

    fn device(name: &str) -> Device {
        Device::new(name, Kind::Whole)
    }

    fn report(entries: &[(&str, Condition)]) -> HealthReport {
        HealthReport {
            devices: entries
                .iter()
                .map(|(name, condition)| {
                    let health = Health {
                        condition: *condition,
                        reason: "xid-79".into(),
                        message: "fell off the bus".into(),
                        since: SystemTime::UNIX_EPOCH,
                    };
                    ((*name).to_owned(), health)
                })
                .collect(),
        }
    }

    /// (device name, health) per entry, checking the pool and timeout on the way.
    fn entries(
        pool: &str,
        msg: &NodeWatchResourcesResponse,
        now: Option<i64>,
    ) -> Vec<(String, HealthStatus)> {
        msg.devices
            .iter()
            .map(|d| {
                let id = d.device.as_ref().unwrap();
                assert_eq!(id.pool_name, pool);
                assert_eq!(d.health_check_timeout_seconds, HEALTH_TIMEOUT_SECONDS);
                if let Some(now) = now {
                    assert_eq!(d.last_updated_time, now);
                }
                (id.device_name.clone(), d.health())
            })
            .collect()
    }

    #[test]
    fn snapshot_maps_every_inventory_device() {
        let devices = [device("gpu-0"), device("gpu-1"), device("gpu-2")];
        let report = report(&[
            ("gpu-1", Condition::Unhealthy),
            ("gpu-2", Condition::Degraded),
            // Not in the inventory: not reported.
            ("gpu-9", Condition::Unhealthy),
        ]);
        let now = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_900);
        let msg = snapshot("node-a", &devices, &report, now);
        assert_eq!(
            entries("node-a", &msg, Some(1_700_000_000)),
            [
                ("gpu-0".to_owned(), HealthStatus::Healthy),
                ("gpu-1".to_owned(), HealthStatus::Unhealthy),
                ("gpu-2".to_owned(), HealthStatus::Healthy),
            ]
        );
        // Why, for the unhealthy and the degraded one; nothing for the healthy one.
        let why: Vec<&str> = msg.devices.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(
            why,
            [
                "",
                "Unhealthy: fell off the bus (xid-79)",
                "Degraded: fell off the bus (xid-79)"
            ]
        );
    }

    #[test]
    fn snapshot_of_nothing_is_empty() {
        let msg = snapshot(
            "node-a",
            &[],
            &report(&[("gpu-0", Condition::Unhealthy)]),
            SystemTime::now(),
        );
        assert!(msg.devices.is_empty());
    }

    #[test]
    fn timeout_outlasts_the_resend_period() {
        assert!(HEALTH_TIMEOUT_SECONDS > 2 * i64::try_from(RESEND.as_secs()).unwrap());
    }

    async fn client(socket: &Path) -> DraResourceHealthClient<tonic::transport::Channel> {
        let uri = format!("unix://{}", socket.display());
        let channel = tonic::transport::Endpoint::from_shared(uri)
            .unwrap()
            .connect()
            .await
            .unwrap();
        DraResourceHealthClient::new(channel)
    }

    #[tokio::test]
    async fn stream_follows_the_health_watch() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("dra.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();

        let (_inventory_tx, inventory) = watch::channel(vec![device("gpu-0"), device("gpu-1")]);
        let (health_tx, health) = watch::channel(HealthReport::default());
        let (stop_tx, stop) = watch::channel(false);
        let feed = HealthFeed {
            pool: "node-a".into(),
            inventory,
            health,
        };
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(DraResourceHealthServer::new(HealthService::new(
                    feed,
                    stop.clone(),
                )))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async move {
                    let mut stop = stop;
                    let _ = stop.wait_for(|s| *s).await;
                }),
        );

        let mut client = client(&socket).await;
        let mut stream = client
            .node_watch_resources(NodeWatchResourcesRequest {})
            .await
            .unwrap()
            .into_inner();
        let within = Duration::from_secs(2);

        let first = tokio::time::timeout(within, stream.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(
            entries("node-a", &first, None),
            [
                ("gpu-0".to_owned(), HealthStatus::Healthy),
                ("gpu-1".to_owned(), HealthStatus::Healthy),
            ]
        );

        health_tx
            .send(report(&[("gpu-1", Condition::Unhealthy)]))
            .unwrap();
        let update = tokio::time::timeout(within, stream.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(
            entries("node-a", &update, None),
            [
                ("gpu-0".to_owned(), HealthStatus::Healthy),
                ("gpu-1".to_owned(), HealthStatus::Unhealthy),
            ]
        );

        // Stopping ends the stream cleanly, and with it the server's graceful shutdown.
        stop_tx.send(true).unwrap();
        let end = tokio::time::timeout(within, stream.message())
            .await
            .unwrap()
            .unwrap();
        assert!(end.is_none());
        drop(stream);
        drop(client);
        tokio::time::timeout(within, server)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn producer_ends_when_the_client_goes() {
        let (_inventory_tx, inventory) = watch::channel(vec![device("gpu-0")]);
        let (_health_tx, health) = watch::channel(HealthReport::default());
        let (_stop_tx, stop) = watch::channel(false);
        let feed = HealthFeed {
            pool: "node-a".into(),
            inventory,
            health,
        };
        let (tx, mut rx) = mpsc::channel(QUEUE);
        let task = tokio::spawn(produce(feed, stop, tx, |m| m));
        assert!(rx.recv().await.is_some());
        drop(rx);
        tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .unwrap()
            .unwrap();
    }
}
