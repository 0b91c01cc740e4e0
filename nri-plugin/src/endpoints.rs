//! graft-nri's metrics and probe endpoints, and what "ready" means for it.
//!
//! Ready: connected to the container runtime and synchronized with it. A standby instance
//! (a rolling update started it beside the running one, and it waits for that one's lock)
//! is ready when the running one says, in its status file, that it is connected and
//! synchronized: the node is served, and this instance takes over when the other exits.
//! Not ready while waiting would deadlock the update: the old pod is only deleted once the
//! new one is ready.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use graft_nri::metrics::NriMetrics;
use graft_record::{nri_readiness, NriReadiness, RecordError};
use graft_runtime::Telemetry;

/// The endpoints; `holding` turns true once this instance holds the status lock.
pub fn telemetry(
    metrics: &Arc<NriMetrics>,
    holding: Arc<AtomicBool>,
    state_dir: PathBuf,
    boot_id: String,
) -> Telemetry {
    let mut telemetry = Telemetry::new("graft_nri_build_info");
    metrics.register(telemetry.registry());
    let m = metrics.clone();
    let ready = move || {
        if holding.load(Ordering::Relaxed) {
            return own_readiness(&m);
        }
        standby_readiness(&state_dir, &boot_id)
    };
    // The endpoints take the reason in words.
    let ready = move || ready().map_err(|e| graft_telemetry::NotReady(e.to_string()));
    telemetry.ready_when(Arc::new(ready))
}

/// Why graft-nri is not ready.
#[derive(Debug, thiserror::Error)]
enum NotReady {
    /// This instance holds the lock and does not serve the runtime (yet).
    #[error("not ready: not connected and synchronized with the container runtime")]
    NotServing,
    /// A standby, and the running instance does not serve the runtime.
    #[error("not ready (standby, waiting for the running graft-nri to exit): {0}")]
    RunningNotServing(String),
    /// A standby that cannot read the running instance's status.
    #[error("not ready (standby): {0}")]
    Unreadable(#[source] RecordError),
}

fn own_readiness(m: &NriMetrics) -> Result<String, NotReady> {
    if m.serving() {
        Ok("ready: connected and synchronized with the container runtime".into())
    } else {
        Err(NotReady::NotServing)
    }
}

/// Another instance holds the lock: ready when it serves the node.
fn standby_readiness(state_dir: &Path, boot_id: &str) -> Result<String, NotReady> {
    match nri_readiness(state_dir, boot_id) {
        Ok(NriReadiness::Ready(st)) => Ok(format!(
            "ready (standby): the running graft-nri (pid {}) is connected and synchronized; \
             this instance takes over when it exits",
            st.pid
        )),
        Ok(NriReadiness::NotReady(why)) => Err(NotReady::RunningNotServing(why)),
        Err(e) => Err(NotReady::Unreadable(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use graft_record::StatusPublisher;

    #[test]
    fn a_standby_is_ready_while_the_running_instance_serves() {
        let dir = tempfile::tempdir().unwrap();
        let why = standby_readiness(dir.path(), "boot")
            .unwrap_err()
            .to_string();
        assert!(why.contains("never run"), "{why}");
        let mut running = StatusPublisher::acquire(dir.path(), "10-graft", "boot".into()).unwrap();
        let why = standby_readiness(dir.path(), "boot")
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("standby") && why.contains("not connected"),
            "{why}"
        );
        running
            .update(|s| {
                s.connected = true;
                s.synchronized = true;
            })
            .unwrap();
        let ok = standby_readiness(dir.path(), "boot").unwrap();
        assert!(ok.contains("standby") && ok.contains("takes over"), "{ok}");
        // Gone (its lock with it): the standby must serve the node itself first.
        drop(running);
        let why = standby_readiness(dir.path(), "boot")
            .unwrap_err()
            .to_string();
        assert!(why.contains("not running"), "{why}");
    }

    #[test]
    fn the_lock_holder_is_ready_once_synchronized() {
        let m = NriMetrics::default();
        assert!(own_readiness(&m).is_err());
        m.configured();
        assert!(own_readiness(&m).is_err());
        m.synchronized();
        assert!(own_readiness(&m).is_ok());
        m.disconnected();
        assert!(own_readiness(&m).is_err());
    }
}
