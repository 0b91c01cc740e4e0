//! graft-driver's metrics and probe endpoints, and what "ready" means for it: registered
//! with the kubelet and the node's first ResourceSlices published. A failing discovery
//! backend does not make it unready (the node still serves the others' devices, and its
//! own last ones): the body names it. A long-running task that stopped does
//! ([`graft_driver::daemon`]): the node would look fine while, say, its slices go stale.
//! Liveness is the server answering at all: it does not
//! depend on the API server.

use std::sync::{Arc, Mutex};

use graft_driver::daemon::{Ended, TasksStopped};
use graft_driver::discovery::report::seconds_since;
use graft_driver::metrics::{DriverMetrics, FailingBackend};
use graft_driver::plugin::registration::RegistrationState;
use graft_runtime::Telemetry;
use graft_telemetry::NotReady;

/// The endpoints, with readiness from the registration, the metrics and the tasks.
pub fn telemetry(
    metrics: &Arc<DriverMetrics>,
    registration: Arc<Mutex<RegistrationState>>,
    tasks: Ended,
) -> Telemetry {
    let mut telemetry = Telemetry::new("graft_driver_build_info");
    metrics.register(telemetry.registry());
    let m = metrics.clone();
    let ready = move || {
        let state = registration
            .lock()
            .map(|s| s.clone())
            .unwrap_or_else(|p| p.into_inner().clone());
        readiness(&state, m.published(), &m.failing_backends(), tasks.check())
            .map_err(|why| NotReady(why.to_string()))
    };
    telemetry.ready_when(Arc::new(ready))
}

/// Why graft-driver is not ready (the `/readyz` body).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Unready {
    /// A long-running task stopped.
    #[error("not ready: {0}")]
    Stopped(TasksStopped),
    /// Registered, but the node's slices are not out yet.
    #[error("not ready: the node's ResourceSlices are not yet published")]
    Unpublished,
    /// The kubelet has not answered the registration yet.
    #[error("not ready: not yet registered with the kubelet")]
    Unregistered,
    /// The kubelet refused the registration, for this reason.
    #[error("not ready: the kubelet rejected the registration: {0}")]
    Rejected(String),
}

fn readiness(
    registration: &RegistrationState,
    published: bool,
    failing: &[FailingBackend],
    tasks: Result<(), TasksStopped>,
) -> Result<String, Unready> {
    tasks.map_err(Unready::Stopped)?;
    match (registration, published) {
        (RegistrationState::Registered, true) if failing.is_empty() => {
            Ok("ready: registered with the kubelet; ResourceSlices published".into())
        }
        (RegistrationState::Registered, true) => Ok(format!(
            "ready: registered with the kubelet; ResourceSlices published; discovery failing: {}",
            failing
                .iter()
                .map(|(name, since, error)| format!(
                    "{name} for {} s ({error})",
                    seconds_since(*since)
                ))
                .collect::<Vec<_>>()
                .join("; ")
        )),
        (RegistrationState::Registered, false) => Err(Unready::Unpublished),
        (RegistrationState::Pending, _) => Err(Unready::Unregistered),
        (RegistrationState::Rejected(why), _) => Err(Unready::Rejected(why.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_registered_and_published() {
        assert!(readiness(&RegistrationState::Pending, true, &[], Ok(())).is_err());
        assert!(readiness(&RegistrationState::Registered, false, &[], Ok(())).is_err());
        assert!(readiness(&RegistrationState::Registered, true, &[], Ok(())).is_ok());
        let why = readiness(
            &RegistrationState::Rejected("old kubelet".into()),
            true,
            &[],
            Ok(()),
        );
        assert!(why.unwrap_err().to_string().contains("old kubelet"));
    }

    #[test]
    fn ready_with_a_failing_backend_named() {
        let failing = [(
            "nvidia",
            std::time::SystemTime::now(),
            "nvidia discovery: NVML not found".to_string(),
        )];
        let body = readiness(&RegistrationState::Registered, true, &failing, Ok(())).unwrap();
        assert!(
            body.ends_with("discovery failing: nvidia for 0 s (nvidia discovery: NVML not found)"),
            "{body}"
        );
    }

    #[test]
    fn not_ready_once_a_task_stopped() {
        let why = readiness(
            &RegistrationState::Registered,
            true,
            &[],
            Err(TasksStopped("publisher panicked: boom".into())),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(why, "not ready: a task stopped: publisher panicked: boom");
    }
}
