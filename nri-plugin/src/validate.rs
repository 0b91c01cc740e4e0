//! `graft-nri --validate`: runs graft's NRI validator ([`graft_nri::validator`]) with its
//! probe and metrics endpoints. Ready once the runtime has configured it, or when the
//! runtime has no validation (nothing to do, and a DaemonSet rollout must not wait on it).

use std::sync::Arc;
use std::time::Duration;

use graft_nri::validator::{Standing, Validator};
use graft_nri_sdk::{self as sdk, Options};
use graft_telemetry::Endpoints;
use prometheus_client::registry::Registry;

/// The validator's endpoints: its counters, the process's figures and readiness.
pub fn endpoints(validator: &Arc<Validator>) -> Endpoints {
    let mut registry = Registry::default();
    validator.register(&mut registry);
    graft_telemetry::register_process(&mut registry);
    graft_telemetry::register_build_info(&mut registry, "graft_nri_validator_build_info");
    let v = validator.clone();
    let ready = move || match v.standing() {
        Standing::Serving(s) => Ok(format!("ready: {s}")),
        Standing::Unsupported(s) => Ok(format!("ready (idle): {s}")),
        Standing::Waiting(why) => Err(graft_telemetry::NotReady(format!(
            "not ready: not connected to the container runtime ({why})"
        ))),
    };
    Endpoints::new(registry, Arc::new(ready))
}

/// Serves the runtime until the session ends, which is an error: the DaemonSet restarts the
/// validator. (On a runtime without validation the SDK keeps retrying, now and then, and the
/// validator stays ready and idle meanwhile: containerd may be upgraded under it.)
pub async fn run(validator: Arc<Validator>, opts: Options) -> anyhow::Result<()> {
    let err = match sdk::run(validator, opts).await {
        Err(e) => anyhow::Error::new(e).context("graft's NRI validator stopped"),
        Ok(()) => anyhow::anyhow!("graft's NRI validator stopped: the session ended"),
    };
    tracing::error!(error = format!("{err:#}"), "graft-nri --validate stops");
    Err(err)
}

/// `graft-nri --validate` from its parsed settings: the validator, its endpoints, and the
/// session, until a signal or the session's end.
pub fn main(
    store: graft_record::RecordStore,
    policy: graft_record::InjectionPolicy,
    deadline: Duration,
    metrics_addr: Option<std::net::SocketAddr>,
    health_socket: &std::path::Path,
    opts: Options,
) -> anyhow::Result<()> {
    let rt = crate::runtime()?;
    rt.block_on(async move {
        tracing::info!(
            version = graft_telemetry::VERSION,
            name = %opts.name, index = %opts.index,
            "graft-nri starting as graft's NRI validator"
        );
        let validator = Arc::new(Validator::new(store, policy, deadline));
        graft_telemetry::serve_or_log(endpoints(&validator), metrics_addr, health_socket);
        tokio::select! {
            ended = run(validator, opts) => ended,
            _ = crate::shutdown_signal() => {
                tracing::info!("stopping on signal");
                Ok(())
            }
        }
    })
}
