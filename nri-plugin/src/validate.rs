//! `graft-nri --validate`: runs graft's NRI validator ([`graft_nri::validator`]) with its
//! probe and metrics endpoints. Ready once the runtime has configured it, or when the
//! runtime has no validation (nothing to do, and a DaemonSet rollout must not wait on it).

use std::sync::Arc;
use std::time::Duration;

use graft_nri::validator::{Standing, Validator};
use graft_nri_sdk::{self as sdk, Options};
use graft_runtime::{Daemon, Signals, Telemetry, Workers};

/// The validator's endpoints: its counters, the process's figures and readiness.
pub fn telemetry(validator: &Arc<Validator>) -> Telemetry {
    let mut telemetry = Telemetry::new("graft_nri_validator_build_info");
    validator.register(telemetry.registry());
    let v = validator.clone();
    let ready = move || match v.standing() {
        Standing::Serving(s) => Ok(format!("ready: {s}")),
        Standing::Unsupported(s) => Ok(format!("ready (idle): {s}")),
        Standing::Waiting(why) => Err(graft_telemetry::NotReady(format!(
            "not ready: not connected to the container runtime ({why})"
        ))),
    };
    telemetry.ready_when(Arc::new(ready))
}

/// `graft-nri --validate` from its parsed settings: the validator, its endpoints, and the
/// session, until a signal or the session's end. The session's end is an error: the
/// DaemonSet restarts the validator. (On a runtime without validation the SDK keeps
/// retrying, now and then, and the validator stays ready and idle meanwhile: containerd may
/// be upgraded under it.)
pub fn main(
    store: graft_record::RecordStore,
    policy: graft_record::InjectionPolicy,
    deadline: Duration,
    metrics_addr: Option<std::net::SocketAddr>,
    health_socket: &std::path::Path,
    opts: Options,
) -> anyhow::Result<()> {
    graft_runtime::block_on(Workers::Fixed(crate::WORKERS), async move {
        tracing::info!(
            version = graft_telemetry::VERSION,
            name = %opts.name, index = %opts.index,
            "graft-nri starting as graft's NRI validator"
        );
        let validator = Arc::new(Validator::new(store, policy, deadline));
        telemetry(&validator).serve(metrics_addr, Some(health_socket));
        let mut signals = Signals::install()?;
        let mut daemon = Daemon::new();
        daemon.spawn("nri-validator", sdk::run(validator, opts));
        match daemon.until_stopped(&mut signals).await {
            Ok(_) => {
                let _overdue = daemon.shutdown(crate::STOP_WAIT).await;
                Ok(())
            }
            Err(ended) => Err(crate::ended_error(
                ended,
                "graft's NRI validator stopped",
                "graft-nri --validate stops",
            )),
        }
    })?
}
