//! Events on the pods the extender scores, so that `kubectl describe pod` says what it
//! preferred and why: one `GpuNodesScored` (Normal) per pod, at its first scoring, naming
//! the demand and the best nodes. A pod kube-scheduler retries is not announced again (the
//! extender remembers the last [`REMEMBERED`] pods), and Events never hold up an answer:
//! they go through a bounded queue that drops what it cannot take.
//!
//! The call names the pod, and anything that can reach the extender can call it; so an
//! Event goes only on a pod the cluster vouches for ([`vouched`]): one of the claims the
//! pod names is, as the API has it, owned by a pod of that namespace, name and uid (a
//! claim made from the pod's template) or reserved for it. A pod whose claims are all
//! shared ones made by hand gets no Event.

use std::collections::{HashSet, VecDeque};

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;

use crate::demand;
use crate::prioritize::{Scored, View};

/// Pods remembered as announced.
pub const REMEMBERED: usize = 4096;
/// Events waiting to be posted; more are dropped.
const QUEUE: usize = 256;

/// One Event to post.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// The pod.
    pub pod: ObjectReference,
    /// What it says.
    pub note: String,
}

/// The note for a scoring: the demand and up to three best nodes.
pub fn note(scored: &Scored) -> String {
    let mut best: Vec<_> = scored.hosts.iter().filter(|h| h.score > 0).collect();
    best.sort_by(|a, b| b.score.cmp(&a.score).then(a.host.cmp(&b.host)));
    let nodes: Vec<String> = best
        .iter()
        .take(3)
        .map(|h| format!("{} ({})", h.host, h.score))
        .collect();
    let island = if scored.demand.one_island > 0 {
        format!(
            ", {} of them on one NVLink island",
            scored.demand.one_island
        )
    } else {
        String::new()
    };
    let preferred = if nodes.is_empty() {
        "no node has room for it now".to_string()
    } else {
        format!("preferred {}", nodes.join(", "))
    };
    let n = scored.demand.gpus;
    let plural = if n == 1 { "" } else { "s" };
    format!("{n} whole GPU{plural}{island}: {preferred}")
}

/// Whether `view`'s claims vouch for `pod` as the call names it: one of its claims is owned
/// by, or reserved for, a pod of its namespace, name and uid.
pub fn vouched(view: &dyn View, pod: &Pod) -> bool {
    let meta = &pod.metadata;
    let (Some(name), Some(uid)) = (meta.name.as_deref(), meta.uid.as_deref()) else {
        return false;
    };
    let ns = meta.namespace.as_deref().unwrap_or("default");
    demand::claim_names(pod).iter().any(|claim| {
        let Some(c) = view.claim(ns, claim) else {
            return false;
        };
        let owned =
            c.metadata.owner_references.iter().flatten().any(|o| {
                o.kind == "Pod" && o.api_version == "v1" && o.name == name && o.uid == uid
            });
        let reserved = c
            .status
            .as_ref()
            .and_then(|s| s.reserved_for.as_ref())
            .into_iter()
            .flatten()
            .any(|r| {
                r.api_group.as_deref().unwrap_or("").is_empty()
                    && r.resource == "pods"
                    && r.name == name
                    && r.uid == uid
            });
        owned || reserved
    })
}

/// Which pods were announced already.
#[derive(Default)]
pub struct Announced {
    seen: HashSet<String>,
    order: VecDeque<String>,
}

impl Announced {
    /// True the first time `uid` is offered (within the last [`REMEMBERED`]).
    pub fn first(&mut self, uid: &str) -> bool {
        if self.seen.contains(uid) {
            return false;
        }
        if self.order.len() >= REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        self.seen.insert(uid.to_string());
        self.order.push_back(uid.to_string());
        true
    }
}

/// The sending half, for the scoring path; full or closed, the notice is dropped.
#[derive(Clone)]
pub struct Notices(mpsc::Sender<Notice>);

impl Notices {
    /// Queues `n` without waiting.
    pub fn send(&self, n: Notice) {
        let _ = self.0.try_send(n);
    }
}

/// The bounded queue alone: what [`poster`] posts from (tests read it directly).
pub fn queue() -> (Notices, mpsc::Receiver<Notice>) {
    let (tx, rx) = mpsc::channel::<Notice>(QUEUE);
    (Notices(tx), rx)
}

/// The queue, and the task that posts what comes through it (it runs until every sender
/// is gone).
pub fn poster(
    client: kube::Client,
    reporter: Reporter,
) -> (Notices, impl std::future::Future<Output = ()> + Send) {
    let (tx, mut rx) = queue();
    let recorder = Recorder::new(client, reporter);
    let run = async move {
        while let Some(n) = rx.recv().await {
            let ev = Event {
                type_: EventType::Normal,
                reason: "GpuNodesScored".into(),
                note: Some(n.note),
                action: "Prioritize".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&ev, &n.pod).await {
                tracing::debug!(error = %e, "posting an Event");
            }
        }
    };
    (tx, run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demand::Demand;
    use graft_api::extender::HostPriority;

    #[test]
    fn the_note_names_the_demand_and_the_best_nodes() {
        let h = |host: &str, score| HostPriority {
            host: host.into(),
            score,
        };
        let scored = Scored {
            hosts: vec![h("a", 3), h("b", 10), h("c", 0), h("d", 7), h("e", 5)],
            demand: Demand {
                gpus: 4,
                one_island: 4,
                unknown_claims: 0,
            },
        };
        assert_eq!(
            note(&scored),
            "4 whole GPUs, 4 of them on one NVLink island: preferred b (10), d (7), e (5)"
        );
        let none = Scored {
            hosts: vec![h("a", 0)],
            demand: Demand {
                gpus: 2,
                ..Demand::default()
            },
        };
        assert_eq!(note(&none), "2 whole GPUs: no node has room for it now");
    }

    #[test]
    fn a_pod_is_announced_once_and_memory_is_bounded() {
        let mut a = Announced::default();
        assert!(a.first("u1"));
        assert!(!a.first("u1"));
        for i in 0..REMEMBERED {
            a.first(&format!("x{i}"));
        }
        assert_eq!(a.seen.len(), REMEMBERED);
        assert!(a.first("u1"), "forgotten after REMEMBERED others");
    }
}
