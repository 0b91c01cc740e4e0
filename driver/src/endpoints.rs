//! graft-driver's metrics and probe endpoints, and what "ready" means for it: registered
//! with the kubelet and the node's first ResourceSlices published. Liveness is the server
//! answering at all: it does not depend on the API server.

use std::sync::{Arc, Mutex};

use graft_driver::metrics::DriverMetrics;
use graft_driver::plugin::registration::RegistrationState;
use graft_telemetry::Endpoints;
use prometheus_client::registry::Registry;

pub fn endpoints(
    metrics: &Arc<DriverMetrics>,
    registration: Arc<Mutex<RegistrationState>>,
) -> Endpoints {
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    graft_telemetry::register_build_info(
        &mut registry,
        "graft_driver_build_info",
        env!("CARGO_PKG_VERSION"),
    );
    let m = metrics.clone();
    let ready = move || {
        let state = registration
            .lock()
            .map(|s| s.clone())
            .unwrap_or_else(|p| p.into_inner().clone());
        readiness(&state, m.published())
    };
    Endpoints::new(registry, Arc::new(ready))
}

fn readiness(registration: &RegistrationState, published: bool) -> Result<String, String> {
    match (registration, published) {
        (RegistrationState::Registered, true) => {
            Ok("ready: registered with the kubelet; ResourceSlices published".into())
        }
        (RegistrationState::Registered, false) => {
            Err("not ready: the node's ResourceSlices are not yet published".into())
        }
        (RegistrationState::Pending, _) => {
            Err("not ready: not yet registered with the kubelet".into())
        }
        (RegistrationState::Rejected(why), _) => Err(format!(
            "not ready: the kubelet rejected the registration: {why}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_registered_and_published() {
        assert!(readiness(&RegistrationState::Pending, true).is_err());
        assert!(readiness(&RegistrationState::Registered, false).is_err());
        assert!(readiness(&RegistrationState::Registered, true).is_ok());
        let why = readiness(&RegistrationState::Rejected("old kubelet".into()), true);
        assert!(why.unwrap_err().contains("old kubelet"));
    }
}
