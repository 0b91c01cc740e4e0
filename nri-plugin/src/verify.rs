//! Synchronize's check of running containers against their pods' records.
//!
//! The check runs after Synchronize's answer (`plugin::sync`), on blocking threads that
//! share the pods to read.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

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

/// Containers that run without what their records say they must have. Pods whose records
/// cannot be read are logged and left alone: they were checked at creation.
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
