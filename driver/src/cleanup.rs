//! graft-driver's cleanup passes: every so often, the prepares left half-done for claims
//! that are gone are rolled back (their setups undone, their records removed).

use std::sync::Arc;
use std::time::Duration;

use graft_driver::edge::Edge;

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
