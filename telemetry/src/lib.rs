//! What graft's daemons share for operations: one small HTTP/1.1 server answering
//! `GET /metrics` (OpenMetrics text), `GET /healthz` and `GET /readyz`, served on a TCP
//! address for scrapers and on a Unix socket for the container's own probes, and the probe
//! client each daemon binary runs as `--probe live|ready`.
//!
//! Why two listeners: the daemons run with the host's network and a rolling update starts
//! the new pod beside the old one. The new one cannot bind the host port until the old one
//! exits (it retries in the background), and a probe through the host port would reach the
//! old instance; the Unix socket in the pod's own directory always reaches this one.

mod error;
mod http;
mod listen;
pub mod logs;
pub mod probe;
mod process;

pub use prometheus_client;

pub use error::{NotReady, ProbeError, TelemetryError};
pub use http::{Endpoints, ReadyCheck, OPENMETRICS_CONTENT_TYPE};
pub use listen::{parse_addr, serve, serve_or_log, ServeConfig, Serving};
pub use process::{figures as process_figures, register_process, Figures as ProcessFigures};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: String,
}

/// graft's version: what the release build stamps (deploy/release/build.sh sets
/// GRAFT_VERSION to the release's, v0.2.0), else the crates' own (a build from a checkout).
pub const VERSION: &str = match option_env!("GRAFT_VERSION") {
    Some(v) => v,
    None => env!("CARGO_PKG_VERSION"),
};

/// Registers `<name>{version="..."} 1`, the usual build information gauge, with [`VERSION`].
pub fn register_build_info(registry: &mut Registry, name: &str) {
    let info = Family::<VersionLabel, Gauge>::default();
    info.get_or_create(&VersionLabel {
        version: VERSION.to_string(),
    })
    .set(1);
    registry.register(name, "Build information: the running version", info);
}

/// Latency buckets for requests that take milliseconds to seconds.
pub fn request_buckets() -> impl Iterator<Item = f64> {
    [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        60.0,
    ]
    .into_iter()
}

#[cfg(test)]
mod tests;
