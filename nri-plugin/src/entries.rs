//! Leaves, for each container graft injected into, an entry saying what it got and from
//! which records (`graftctl explain` reads it). Diagnostics: a failure is logged, never
//! turned into a refusal.
//!
//! Entries are written in batches, [`BATCH_DELAY`] after the first of a batch was made:
//! not while the runtime applies the answer, and one blocking-thread wake-up for a burst
//! of containers rather than one each.

use std::borrow::Borrow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use graft_record::containers::{
    write_entry, AppliedEdits, ContainerEntry, PodRef, RecordRef, CONTAINER_ENTRY_VERSION,
};
use graft_record::ClaimRecord;

use crate::inject::Plan;

/// Whom the entry is about.
pub struct Target<'a> {
    /// The runtime's container ID.
    pub container_id: &'a str,
    /// The container's name in its pod.
    pub container: &'a str,
    /// The pod's UID.
    pub pod_uid: &'a str,
    /// The pod's namespace.
    pub pod_namespace: &'a str,
    /// The pod's name.
    pub pod_name: &'a str,
}

/// The entry for `plan`, built from the records it came from.
pub fn entry<R: Borrow<ClaimRecord>>(
    target: &Target<'_>,
    plan: &Plan,
    claims: &[R],
) -> ContainerEntry {
    let records = plan
        .grants
        .iter()
        .map(|g| {
            let rec = claims
                .iter()
                .map(Borrow::borrow)
                .find(|c: &&ClaimRecord| c.claim.uid == g.uid);
            let mut requests: Vec<String> = rec
                .into_iter()
                .flat_map(|r| r.devices.iter())
                .filter(|d| g.devices.contains(&d.name))
                .flat_map(|d| d.requests.iter().cloned())
                .collect();
            requests.sort();
            requests.dedup();
            RecordRef {
                claim_uid: g.uid.clone(),
                namespace: rec.map(|r| r.claim.namespace.clone()).unwrap_or_default(),
                name: rec.map(|r| r.claim.name.clone()).unwrap_or_default(),
                record: format!("claims/{}.json", g.uid),
                requests,
                devices: g.devices.clone(),
            }
        })
        .collect();
    ContainerEntry {
        version: CONTAINER_ENTRY_VERSION,
        id: target.container_id.to_string(),
        pod: PodRef {
            uid: target.pod_uid.to_string(),
            namespace: target.pod_namespace.to_string(),
            name: target.pod_name.to_string(),
        },
        container: target.container.to_string(),
        injected_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        records,
        edits: AppliedEdits::from_edits(&plan.edits),
    }
}

/// Writes the entry; logs why not when it cannot.
pub fn leave(root: &Path, entry: &ContainerEntry) {
    if let Err(e) = write_entry(root, entry) {
        tracing::warn!(container = %entry.id, error = %e,
            "cannot write the container's graftctl entry");
    }
}

/// How long an entry waits for others to be written with it.
pub const BATCH_DELAY: Duration = Duration::from_millis(20);

/// Entries made and not yet written.
#[derive(Debug, Clone, Default)]
pub struct Pending(Arc<Mutex<Vec<ContainerEntry>>>);

impl Pending {
    /// Queues `entry` to be written below state directory `root` with the others of its
    /// batch. Needs a tokio runtime.
    pub fn push(&self, root: PathBuf, entry: ContainerEntry) {
        let first = {
            let mut q = self.lock();
            q.push(entry);
            q.len() == 1
        };
        if first {
            let me = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(BATCH_DELAY).await;
                let batch = std::mem::take(&mut *me.lock());
                tokio::task::spawn_blocking(move || {
                    for e in &batch {
                        leave(&root, e);
                    }
                });
            });
        }
    }

    /// Drops the queued entry of container `id` (the runtime removed it).
    pub fn forget(&self, id: &str) {
        self.lock().retain(|e| e.id != id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<ContainerEntry>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
