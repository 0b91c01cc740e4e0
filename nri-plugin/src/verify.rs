//! Synchronize's check of running containers against their pods' records.
//!
//! The records are read on a blocking thread and waited for only so long: Synchronize must
//! answer within the runtime's registration timeout, or the runtime drops graft-nri and
//! creates every container on the node without it. A pod whose records are not read in
//! time is left unverified (it was checked when its containers were created).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use graft_proto::nri::{self, ContainerState};
use graft_record::{ClaimRecord, InjectionPolicy, RecordError, RecordStore};

use crate::inject::plan;

/// The records of each pod, by pod UID, as read.
pub type PodClaims = HashMap<String, Read>;

type Read = Result<Vec<Arc<ClaimRecord>>, RecordError>;

/// Threads that read records for Synchronize: one per CPU, at most four (the reads are
/// small and mostly parsing; more threads than CPUs only wait for each other).
fn readers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// Whether the runtime has this container in a state that had its CreateContainer answered.
fn live(ctr: &nri::Container) -> bool {
    matches!(
        ctr.state.enum_value_or(ContainerState::CONTAINER_UNKNOWN),
        ContainerState::CONTAINER_CREATED
            | ContainerState::CONTAINER_RUNNING
            | ContainerState::CONTAINER_PAUSED
    )
}

/// UIDs of the pods that have a live container, each once, in request order.
pub fn pods_to_check(pods: &[nri::PodSandbox], containers: &[nri::Container]) -> Vec<String> {
    let with_live: HashSet<&str> = containers
        .iter()
        .filter(|c| live(c))
        .map(|c| c.pod_sandbox_id.as_str())
        .collect();
    let mut seen = HashSet::new();
    pods.iter()
        .filter(|p| with_live.contains(p.id.as_str()) && seen.insert(p.uid.as_str()))
        .map(|p| p.uid.clone())
        .collect()
}

/// Reads the records of `pod_uids` now, on [`readers`] threads.
pub fn read_now(store: &RecordStore, pod_uids: &[String]) -> PodClaims {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..readers())
            .map(|_| {
                s.spawn(|| {
                    let mut got = Vec::new();
                    while let Some(uid) = pod_uids.get(next.fetch_add(1, Ordering::Relaxed)) {
                        got.push((uid.clone(), store.pod_claims_shared(uid)));
                    }
                    got
                })
            })
            .collect();
        // A reader that panicked leaves its pods out, as an unread pod is.
        workers
            .into_iter()
            .filter_map(|w| w.join().ok())
            .flatten()
            .collect()
    })
}

/// Reads the records of `pod_uids` from `store` on a blocking thread, returning what was
/// read within `limit`. Pods left out are logged; the thread stops at the next pod once
/// nobody waits.
pub async fn read_within(store: RecordStore, pod_uids: Vec<String>, limit: Duration) -> PodClaims {
    read_with(move |uid| store.pod_claims_shared(uid), pod_uids, limit).await
}

/// Reads with `read` on [`readers`] blocking threads, which share the list of pods.
async fn read_with(
    read: impl Fn(&str) -> Read + Send + Sync + 'static,
    pod_uids: Vec<String>,
    limit: Duration,
) -> PodClaims {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let wanted = pod_uids.len();
    let shared = Arc::new((read, pod_uids, AtomicUsize::new(0)));
    for _ in 0..readers().min(wanted) {
        let (tx, shared) = (tx.clone(), shared.clone());
        tokio::task::spawn_blocking(move || {
            let (read, uids, next) = &*shared;
            while let Some(uid) = uids.get(next.fetch_add(1, Ordering::Relaxed)) {
                if tx.send((uid.clone(), read(uid))).is_err() {
                    return;
                }
            }
        });
    }
    drop(tx);
    let mut out = PodClaims::new();
    let deadline = tokio::time::Instant::now() + limit;
    while out.len() < wanted {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some((uid, claims))) => {
                out.insert(uid, claims);
            }
            // The thread ended early (it panicked): what it read is all there is.
            Ok(None) => break,
            Err(_) => {
                tracing::error!(
                    read = out.len(),
                    unread = wanted - out.len(),
                    "the records of some pods were not read within {limit:?}; their running \
                     containers are not verified now (each was checked when it was created)"
                );
                break;
            }
        }
    }
    out
}

/// Containers that run without what their records say they must have. Pods whose records
/// cannot be read (or were not read in time) are logged and left alone: they were checked
/// at creation.
pub fn uninjected(
    pods: &[nri::PodSandbox],
    containers: &[nri::Container],
    claims_of_pod: &PodClaims,
    policy: &InjectionPolicy,
) -> Vec<(nri::Container, String)> {
    let by_id: HashMap<&str, &nri::PodSandbox> = pods.iter().map(|p| (p.id.as_str(), p)).collect();
    let mut found = Vec::new();
    for ctr in containers.iter().filter(|c| live(c)) {
        let Some(pod) = by_id.get(ctr.pod_sandbox_id.as_str()) else {
            continue;
        };
        let claims = match claims_of_pod.get(&pod.uid) {
            None => continue,
            Some(Ok(c)) if c.is_empty() => continue,
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                tracing::error!(pod = %pod.name, container = %ctr.name, error = %e,
                    "cannot verify a running container: its pod's records are unreadable");
                continue;
            }
        };
        match plan(claims, &pod.uid, &ctr.name, policy) {
            Ok(Some(p)) => {
                if let Some(why) = p.missing_from(ctr) {
                    found.push((
                        ctr.clone(),
                        format!(
                            "container {} of pod {}/{} runs without its recorded devices: {why}",
                            ctr.name, pod.namespace, pod.name
                        ),
                    ));
                }
            }
            Ok(None) => {}
            Err(e) => tracing::error!(pod = %pod.name, container = %ctr.name, error = %e,
                "cannot verify a running container"),
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One pod's read hangs: Synchronize still gets the other pods' records within the
    /// limit (those after it too, when there is a second reader), and the hung one is left
    /// out.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hung_read_is_left_out_in_time() {
        let (release, hang) = std::sync::mpsc::channel::<()>();
        let hang = std::sync::Mutex::new(hang);
        let read = move |uid: &str| -> Read {
            if uid == "stuck" {
                let _ = hang.lock().map(|h| h.recv());
            }
            Ok(Vec::new())
        };
        let uids = ["a", "stuck", "b"].map(String::from).to_vec();
        let started = std::time::Instant::now();
        let got = read_with(read, uids, Duration::from_millis(200)).await;
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(got.contains_key("a") && !got.contains_key("stuck"));
        // With a second reader, the pod after the hung one is read too.
        assert_eq!(got.contains_key("b"), readers() > 1);
        drop(release);
    }
}
