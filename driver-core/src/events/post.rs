//! One reporter and one background poster for every Event graft-driver posts, and the object references Events are about.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder, Reporter};
use tokio::sync::mpsc;

/// The events.k8s.io API refuses a note longer than this (bytes).
pub const NOTE_LIMIT: usize = 1024;
/// Events waiting to be posted; more are dropped (and counted).
pub const QUEUE: usize = 256;

/// graft-driver's reportingController: a qualified name, as the Events API asks (its
/// example is `kubernetes.io/kubelet`). Releases before it reported as `graft-driver`.
pub const CONTROLLER: &str = "graft.dev/graft-driver";

/// graft-driver as the reporting controller, this node as the instance.
pub fn reporter(node: &str) -> Reporter {
    Reporter {
        controller: CONTROLLER.into(),
        instance: Some(node.to_string()),
    }
}

/// The one recorder construction of graft-driver.
pub fn recorder(client: kube::Client, node: &str) -> Recorder {
    Recorder::new(client, reporter(node))
}

/// A reference to the Node `node`, for its Events.
pub fn node_ref(node: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(node.to_string()),
        ..Default::default()
    }
}

/// A reference to a ResourceClaim, for its Events.
pub fn claim_ref(namespace: &str, name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("resource.k8s.io/v1".into()),
        kind: Some("ResourceClaim".into()),
        namespace: Some(namespace.to_string()),
        name: Some(name.to_string()),
        uid: Some(uid.to_string()),
        ..Default::default()
    }
}

/// A reference to a Pod, for its Events.
pub fn pod_ref(namespace: &str, name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.to_string()),
        name: Some(name.to_string()),
        uid: Some(uid.to_string()),
        ..Default::default()
    }
}

/// `note` cut to [`NOTE_LIMIT`] bytes at a character boundary, marked when cut.
pub fn bounded_note(note: String) -> String {
    if note.len() <= NOTE_LIMIT {
        return note;
    }
    const MARK: &str = " [...]";
    let mut end = NOTE_LIMIT - MARK.len();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &note[..end])
}

/// An Event and the object it is about.
pub type Posting = (Event, ObjectReference);

/// Hands Events to a background task that posts them; full queue → dropped and counted.
#[derive(Clone)]
pub struct Poster {
    tx: mpsc::Sender<Posting>,
    dropped: Arc<AtomicU64>,
}

impl Poster {
    /// A poster whose Events go to `recorder` from a task of its own.
    pub fn spawn(recorder: Recorder) -> Self {
        let (poster, task) = Self::with_task(recorder);
        tokio::spawn(task);
        poster
    }

    /// A poster and the task that posts its Events, for a caller that runs its own tasks.
    pub fn with_task(
        recorder: Recorder,
    ) -> (Self, impl std::future::Future<Output = ()> + Send + 'static) {
        let (poster, mut rx) = Self::channel(QUEUE);
        let task = async move {
            while let Some((ev, r)) = rx.recv().await {
                if let Err(e) = recorder.publish(&ev, &r).await {
                    tracing::warn!(error = %e, reason = ev.reason, kind = ?r.kind,
                        object = ?r.name, "cannot post an Event");
                }
            }
        };
        (poster, task)
    }

    /// A poster and the receiving end of its queue (tests read Events from it).
    pub fn channel(capacity: usize) -> (Self, mpsc::Receiver<Posting>) {
        let (tx, rx) = mpsc::channel(capacity);
        let poster = Poster {
            tx,
            dropped: Arc::default(),
        };
        (poster, rx)
    }

    /// Queues an Event; never waits. `false` when it was dropped.
    pub fn post(&self, mut ev: Event, regarding: ObjectReference) -> bool {
        ev.note = ev.note.map(bounded_note);
        match self.tx.try_send((ev, regarding)) {
            Ok(()) => true,
            Err(e) => {
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                let (ev, r) = match e {
                    mpsc::error::TrySendError::Full(p) | mpsc::error::TrySendError::Closed(p) => p,
                };
                tracing::warn!(dropped = n, reason = ev.reason, object = ?r.name,
                    "Event queue full; Event dropped");
                false
            }
        }
    }

    /// Events dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::events::EventType;

    fn ev(note: &str) -> Event {
        Event {
            type_: EventType::Warning,
            reason: "R".into(),
            note: Some(note.into()),
            action: "A".into(),
            secondary: None,
        }
    }

    #[test]
    fn notes_are_bounded_at_a_char_boundary() {
        assert_eq!(bounded_note("short".into()), "short");
        let long = "é".repeat(NOTE_LIMIT);
        let cut = bounded_note(long);
        assert!(
            cut.len() <= NOTE_LIMIT && cut.ends_with("[...]"),
            "{}",
            cut.len()
        );
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts() {
        let (p, mut rx) = Poster::channel(2);
        assert!(p.post(ev("a"), node_ref("n")));
        assert!(p.post(ev("b"), node_ref("n")));
        assert!(!p.post(ev("c"), node_ref("n")));
        assert_eq!(p.dropped(), 1);
        assert_eq!(rx.recv().await.unwrap().0.note.as_deref(), Some("a"));
    }
}
