//! Kubernetes Events for health changes: on the Node, and on the claims and pods that hold
//! the device (from graft's own records), so that `kubectl describe pod` says why its GPU
//! went bad and `kubectl get events` tells the operator when it came back.

use std::path::PathBuf;

use graft_record::RecordStore;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use tokio::sync::watch;

use super::post::{claim_ref, pod_ref};
use crate::health::taints::taint_key;
use crate::health::{Condition, DeviceHealth, HealthReport};

/// One device's change between two reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// The device (by name) entered a condition.
    Became(String, DeviceHealth),
    /// The device (by name) is healthy again.
    Recovered(String),
}

/// What changed from `before` to `after`.
pub fn transitions(before: &HealthReport, after: &HealthReport) -> Vec<Transition> {
    let mut out: Vec<Transition> = after
        .devices
        .iter()
        .filter(|(name, h)| {
            before
                .get(name)
                .is_none_or(|b| b.condition != h.condition || b.reason != h.reason)
        })
        .map(|(name, h)| Transition::Became(name.clone(), h.clone()))
        .collect();
    out.extend(
        before
            .devices
            .keys()
            .filter(|name| after.get(name).is_none())
            .map(|name| Transition::Recovered(name.clone())),
    );
    out
}

/// The Event's action names the device: the recorder folds Events with the same object,
/// reason and action into one series that keeps the first note, so without it a second
/// GPU's change on the same Node would show as the first GPU's again.
fn action(device: &str) -> String {
    format!("CheckHealth:{device}")
}

/// The Event for a transition, with the taint the device carries (`key` for a condition).
pub fn event_for(t: &Transition, taint_key: impl Fn(Condition) -> String) -> Event {
    match t {
        Transition::Became(name, h) => {
            let (reason, effect) = match h.condition {
                Condition::Unhealthy => ("DeviceUnhealthy", "it receives no new pods"),
                Condition::Degraded => ("DeviceDegraded", "scheduling is unaffected"),
            };
            Event {
                type_: EventType::Warning,
                reason: reason.into(),
                note: Some(format!(
                    "{name}: {}; tainted {}={}, {effect}",
                    h.message,
                    taint_key(h.condition),
                    h.reason
                )),
                action: action(name),
                secondary: None,
            }
        }
        Transition::Recovered(name) => Event {
            type_: EventType::Normal,
            reason: "DeviceRecovered".into(),
            note: Some(format!("{name} is healthy again; its taint is removed")),
            action: action(name),
            secondary: None,
        },
    }
}

/// Claims and pods on this node holding `device`, from the records.
fn holders(store: &RecordStore, device: &str) -> Vec<ObjectReference> {
    let mut out = Vec::new();
    let uids = match store.claim_uids() {
        Ok(u) => u,
        Err(e) => {
            tracing::warn!(error = %e, "health events: cannot list the records");
            return out;
        }
    };
    for uid in uids {
        let Ok(Some(rec)) = store.get_claim(&uid) else {
            continue;
        };
        if !rec.devices.iter().any(|d| d.name == device) {
            continue;
        }
        out.push(claim_ref(
            &rec.claim.namespace,
            &rec.claim.name,
            &rec.claim.uid,
        ));
        for p in rec.pods.iter().filter(|p| !p.name.is_empty()) {
            out.push(pod_ref(&p.namespace, &p.name, &p.uid));
        }
    }
    out
}

/// Posts Events for every change of `health` until its sender is gone.
pub async fn run(
    client: kube::Client,
    node: String,
    driver: String,
    state_dir: PathBuf,
    mut health: watch::Receiver<HealthReport>,
) {
    let recorder = super::post::recorder(client, &node);
    let node_ref = super::post::node_ref(&node);
    let mut before = health.borrow_and_update().clone();
    while health.changed().await.is_ok() {
        let after = health.borrow_and_update().clone();
        let changes = transitions(&before, &after);
        before = after;
        if changes.is_empty() {
            continue;
        }
        let dir = state_dir.clone();
        let names: Vec<String> = changes
            .iter()
            .map(|t| match t {
                Transition::Became(n, _) | Transition::Recovered(n) => n.clone(),
            })
            .collect();
        // Reading records is file I/O: a blocking thread.
        let held = tokio::task::spawn_blocking(move || match RecordStore::open(&dir) {
            Ok(store) => names.iter().map(|n| holders(&store, n)).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "health events: cannot open the records");
                vec![Vec::new(); names.len()]
            }
        })
        .await
        .unwrap_or_default();
        for (i, t) in changes.iter().enumerate() {
            let ev = event_for(t, |c| taint_key(&driver, c));
            let refs = std::iter::once(&node_ref).chain(held.get(i).into_iter().flatten());
            for r in refs {
                if let Err(e) = recorder.publish(&ev, r).await {
                    tracing::warn!(error = %e, object = ?r.name, "health events: cannot post an Event");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn h(condition: Condition, reason: &str) -> DeviceHealth {
        DeviceHealth {
            condition,
            reason: reason.into(),
            message: format!("XID {reason}"),
            since: SystemTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn transitions_and_their_events() {
        let mut a = HealthReport::default();
        a.devices
            .insert("gpu-1".into(), h(Condition::Degraded, "xid-13"));
        a.devices
            .insert("gpu-2".into(), h(Condition::Unhealthy, "xid-48"));
        let mut b = HealthReport::default();
        b.devices
            .insert("gpu-1".into(), h(Condition::Unhealthy, "xid-79"));
        b.devices
            .insert("gpu-3".into(), h(Condition::Degraded, "xid-31"));
        let t = transitions(&a, &b);
        assert_eq!(t.len(), 3);
        assert!(matches!(&t[0], Transition::Became(n, _) if n == "gpu-1"));
        assert!(matches!(&t[1], Transition::Became(n, _) if n == "gpu-3"));
        assert_eq!(t[2], Transition::Recovered("gpu-2".into()));
        assert!(transitions(&b, &b).is_empty());

        let key = |c: Condition| format!("graft.dev/{c:?}");
        let e = event_for(&t[0], key);
        assert_eq!(e.reason, "DeviceUnhealthy");
        assert_eq!(
            e.note.as_deref(),
            Some("gpu-1: XID xid-79; tainted graft.dev/Unhealthy=xid-79, it receives no new pods")
        );
        assert_eq!(event_for(&t[1], key).reason, "DeviceDegraded");
        assert_eq!(event_for(&t[2], key).reason, "DeviceRecovered");
        // Two devices' Events differ in what the recorder keys a series on.
        assert_ne!(event_for(&t[0], key).action, event_for(&t[1], key).action);
    }
}
