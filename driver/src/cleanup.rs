//! graft-driver's cleanup passes: every so often, the prepares left half-done for claims
//! that are gone are rolled back (their setups undone, their records removed); and the
//! state disk's write-back check, which reports the disk errors the unsynced records'
//! writes do not (graft-record's `durability`).

use std::sync::Arc;
use std::time::Duration;

use graft_driver::edge::Edge;
use graft_driver::events::node as node_events;
use graft_driver::events::Poster;
use graft_record::durability::WritebackCheck;
use k8s_openapi::api::core::v1::ObjectReference;

/// Runs a pass, then one every `every`, until the task is stopped.
pub async fn run(edge: Arc<Edge>, every: Duration) {
    loop {
        match edge.cleanup().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(claims = n, "rolled back stale prepares"),
            Err(e) => tracing::warn!(error = %e, "checkpoint cleanup failed"),
        }
        tokio::time::sleep(every).await;
    }
}

/// Checks the state disk's write-back every `every`, until the task is stopped. While a
/// check fails, the record store refuses new claims; each change is logged once, and a
/// failure is a Warning Event on the Node (`StateDiskFailed`).
pub async fn check_writeback(
    check: Arc<WritebackCheck>,
    every: Duration,
    events: Poster,
    node: ObjectReference,
) {
    let mut failing = false;
    loop {
        let c = Arc::clone(&check);
        let out = match tokio::task::spawn_blocking(move || c.check()).await {
            Ok(out) => out.map_err(|e| e.to_string()),
            Err(e) => Err(format!("the check's thread ended: {e}")),
        };
        match (out, failing) {
            (Err(e), false) => {
                tracing::error!(error = e, "the state directory's disk failed a write-back check; refusing new claims until it passes");
                events.post(node_events::state_disk_failed(&e), node.clone());
                failing = true;
            }
            (Ok(()), true) => {
                tracing::warn!("the state directory's disk passed its write-back check again; recording claims");
                failing = false;
            }
            _ => {}
        }
        tokio::time::sleep(every).await;
    }
}
