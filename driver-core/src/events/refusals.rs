//! `DeviceInjectionRefused` on a pod whose container graft-nri refused: graft-nri journals
//! each refusal in the state directory (it makes no API calls); this watches the journal,
//! queues the Event and deletes the entry. Entries are hostile input: graft-record
//! bounds and validates them, and an entry that is not a valid refusal is logged and
//! deleted.

use std::path::{Path, PathBuf};
use std::time::Duration;

use graft_record::refusals::{self, Refusal};
use kube::runtime::events::{Event, EventType};

use super::post::{pod_ref, Poster, Posting};
use crate::inotify;

/// The Event reason of a container graft-nri refused.
pub const REFUSED: &str = "DeviceInjectionRefused";
/// The journal is read at least this often (inotify may miss a change).
const EVERY: Duration = Duration::from_secs(30);

/// The Event on the pod of refusal `r`.
pub fn refusal_event(r: &Refusal) -> Posting {
    let claims = match r.claims.as_slice() {
        [] => String::new(),
        [one] => format!(" with claim {one}"),
        many => format!(" with claims {}", many.join(", ")),
    };
    let ev = Event {
        type_: EventType::Warning,
        reason: REFUSED.into(),
        note: Some(format!(
            "graft-nri refused to create container {:?} ({}){claims}: {}",
            r.container, r.container_id, r.reason
        )),
        action: "InjectDevices".into(),
        secondary: None,
    };
    (ev, pod_ref(&r.pod.namespace, &r.pod.name, &r.pod.uid))
}

/// Reads the journal, deletes every entry read, and returns the Events of the valid ones
/// (file I/O: call it on a blocking thread).
pub fn drain(state_dir: &Path) -> Vec<Posting> {
    let entries = match refusals::read_all(state_dir) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read graft-nri's refusal journal");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for e in entries {
        match &e.refusal {
            Ok(r) => out.push(refusal_event(r)),
            Err(why) => {
                tracing::warn!(
                    entry = e.name,
                    reason = %why,
                    "refusal journal: entry skipped"
                )
            }
        }
        if let Err(err) = refusals::remove(state_dir, &e.name) {
            tracing::warn!(entry = e.name, error = %err, "refusal journal: cannot remove an entry");
        }
    }
    out
}

/// Posts the journal's refusals as they come, until the process ends.
pub async fn run(poster: Poster, state_dir: PathBuf) {
    if let Err(e) = refusals::create_dir(&state_dir) {
        tracing::warn!(error = %e, "no refusal journal; refusals get no Event on the pod");
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    let dir = refusals::journal_dir(&state_dir);
    if let Err(e) = inotify::spawn_watcher(move || vec![dir.clone()], tx) {
        tracing::warn!(error = %e, "refusal journal: no change notification; read every {EVERY:?}");
    }
    loop {
        let dir = state_dir.clone();
        let found = tokio::task::spawn_blocking(move || drain(&dir))
            .await
            .unwrap_or_default();
        for (ev, r) in found {
            poster.post(ev, r);
        }
        tokio::select! {
            _ = rx.recv() => {}
            _ = tokio::time::sleep(EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use graft_record::refusals::PodRef;

    fn refusal() -> Refusal {
        Refusal::new(
            PodRef {
                namespace: "ns".into(),
                name: "p".into(),
                uid: "u-1".into(),
            },
            "main",
            "abc",
            &["ns/gpu".into()],
            "device gpu-0 is absent",
        )
    }

    #[test]
    fn the_event_is_on_the_pod_and_names_claim_and_reason() {
        let (ev, r) = refusal_event(&refusal());
        assert_eq!(ev.type_, EventType::Warning);
        assert_eq!(ev.reason, "DeviceInjectionRefused");
        assert_eq!(
            ev.note.as_deref(),
            Some("graft-nri refused to create container \"main\" (abc) with claim ns/gpu: device gpu-0 is absent")
        );
        assert_eq!(r.kind.as_deref(), Some("Pod"));
        assert_eq!(
            (r.namespace.as_deref(), r.name.as_deref(), r.uid.as_deref()),
            (Some("ns"), Some("p"), Some("u-1"))
        );
    }

    #[test]
    fn drain_posts_valid_entries_and_removes_all() {
        let d = tempfile::tempdir().unwrap();
        refusals::append(d.path(), &refusal()).unwrap();
        let dir = refusals::journal_dir(d.path());
        std::fs::write(dir.join("0000000000001-9.json"), b"not json").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.join("0000000000002-9.json")).unwrap();
        let got = drain(d.path());
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1.name.as_deref(), Some("p"));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        assert!(drain(d.path()).is_empty());
    }
}
