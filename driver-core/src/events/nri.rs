//! The Node's Events while graft-nri is away: graft-driver then refuses every prepare on the
//! node (see `claims::seams::NriGate`). `NRIPluginNotConnected` (Warning) once per outage that
//! lasts past a grace period, `NRIPluginConnected` (Normal) when it ends.
//!
//! A periodic check rather than one at prepare time: the operator learns of the outage
//! even when no pod is waiting, and of its end without a prepare to notice it. The grace
//! keeps a restart of the graft pod (graft-nri reconnecting within seconds) quiet. The
//! check reads one small file and tries one lock.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{Event, EventType};

use super::post::{node_ref, Poster};
use crate::claims::seams::{NotReady, NriGate, StatusFile};

/// The Event reason of an outage of graft-nri.
pub const NOT_CONNECTED: &str = "NRIPluginNotConnected";
/// The Event reason of its end.
pub const CONNECTED: &str = "NRIPluginConnected";

/// What the check knows of the current outage.
#[derive(Debug)]
enum State {
    Up,
    Down {
        since: Instant,
        since_wall: SystemTime,
        reported: bool,
    },
}

/// Turns readiness observations into at most one Event per outage start and end.
#[derive(Debug)]
pub struct NriWatch {
    grace: Duration,
    state: State,
}

impl NriWatch {
    /// A watch that reports outages longer than `grace`.
    pub fn new(grace: Duration) -> Self {
        NriWatch {
            grace,
            state: State::Up,
        }
    }

    /// One observation at `now` (`wall`: the same instant by the clock, for the message).
    pub fn observe(
        &mut self,
        now: Instant,
        wall: SystemTime,
        ready: Result<(), NotReady>,
    ) -> Option<Event> {
        match (&mut self.state, ready) {
            (State::Up, Ok(())) => None,
            (State::Up, Err(why)) => {
                self.state = State::Down {
                    since: now,
                    since_wall: wall,
                    reported: false,
                };
                // A zero grace reports at once.
                self.observe(now, wall, Err(why))
            }
            (
                State::Down {
                    since,
                    since_wall,
                    reported,
                },
                Err(why),
            ) => {
                if *reported || now.duration_since(*since) < self.grace {
                    return None;
                }
                *reported = true;
                Some(not_connected(&why.to_string(), *since_wall))
            }
            (
                State::Down {
                    since, reported, ..
                },
                Ok(()),
            ) => {
                let ev = reported.then(|| connected(now.duration_since(*since)));
                self.state = State::Up;
                ev
            }
        }
    }

    /// Since when graft-nri has been away, once the outage is past the grace; `None`
    /// while it is up or within the grace.
    pub fn outage(&self) -> Option<SystemTime> {
        match self.state {
            State::Down {
                since_wall,
                reported: true,
                ..
            } => Some(since_wall),
            _ => None,
        }
    }
}

fn rfc3339(t: SystemTime) -> String {
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| format!("{ms} ms after the epoch"))
}

fn not_connected(why: &str, since: SystemTime) -> Event {
    Event {
        type_: EventType::Warning,
        reason: NOT_CONNECTED.into(),
        note: Some(format!(
            "{why} (since {}); graft-driver refuses to prepare claims on this node until \
             graft-nri is connected, so pods with graft claims stay pending",
            rfc3339(since)
        )),
        action: "CheckNRIPlugin".into(),
        secondary: None,
    }
}

fn connected(after: Duration) -> Event {
    Event {
        type_: EventType::Normal,
        reason: CONNECTED.into(),
        note: Some(format!(
            "graft-nri is connected again after {} s; prepares proceed",
            after.as_secs()
        )),
        action: "CheckNRIPlugin".into(),
        secondary: None,
    }
}

/// Checks graft-nri's status every few seconds, posts the Node's Events and keeps
/// `outage` ([`NriWatch::outage`]) for the publisher's taint.
pub async fn run(
    poster: Poster,
    node: String,
    state_dir: PathBuf,
    boot_id: String,
    grace: Duration,
    outage: tokio::sync::watch::Sender<Option<SystemTime>>,
) {
    let gate = std::sync::Arc::new(StatusFile { state_dir, boot_id });
    let every = (grace / 2).clamp(Duration::from_secs(1), Duration::from_secs(5));
    let mut watch = NriWatch::new(grace);
    loop {
        let g = std::sync::Arc::clone(&gate);
        // A file read and a lock attempt: a blocking thread.
        let ready = tokio::task::spawn_blocking(move || g.ready())
            .await
            .unwrap_or_else(|e| Err(NotReady::Unchecked(std::sync::Arc::new(e))));
        if let Some(ev) = watch.observe(Instant::now(), SystemTime::now(), ready) {
            tracing::info!(reason = ev.reason, note = ?ev.note, "graft-nri status changed");
            poster.post(ev, node_ref(&node));
        }
        let now = watch.outage();
        outage.send_if_modified(|o| std::mem::replace(o, now) != now);
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_per_outage_after_the_grace_and_one_normal_at_its_end() {
        let t0 = Instant::now();
        let wall = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let s = |n: u64| t0 + Duration::from_secs(n);
        let down = || Err(NotReady::Status("graft-nri (pid 7) is not running".into()));
        let mut w = NriWatch::new(Duration::from_secs(10));
        assert!(w.observe(s(0), wall, Ok(())).is_none());
        // A short blip (a restart) says nothing.
        assert!(w.observe(s(1), wall, down()).is_none());
        assert!(w.observe(s(5), wall, Ok(())).is_none());
        // A real outage: once, after the grace.
        assert!(w.observe(s(20), wall, down()).is_none());
        assert_eq!(w.outage(), None);
        let ev = w.observe(s(30), wall, down()).expect("warning");
        assert_eq!(w.outage(), Some(wall));
        assert_eq!(ev.type_, EventType::Warning);
        assert_eq!(ev.reason, "NRIPluginNotConnected");
        let note = ev.note.unwrap();
        assert!(
            note.starts_with("graft-nri (pid 7) is not running (since 2023-11-14T22:13:20Z)"),
            "{note}"
        );
        for n in 31..40 {
            assert!(w.observe(s(n), wall, down()).is_none());
        }
        let ev = w.observe(s(50), wall, Ok(())).expect("normal");
        assert_eq!(ev.type_, EventType::Normal);
        assert_eq!(ev.reason, "NRIPluginConnected");
        assert!(ev.note.unwrap().contains("after 30 s"));
        assert_eq!(w.outage(), None);
        assert!(w.observe(s(51), wall, Ok(())).is_none());
        // The next outage is reported again.
        assert!(w.observe(s(60), wall, down()).is_none());
        assert!(w.observe(s(70), wall, down()).is_some());
    }

    #[test]
    fn zero_grace_reports_at_once() {
        let mut w = NriWatch::new(Duration::ZERO);
        let ev = w.observe(
            Instant::now(),
            SystemTime::now(),
            Err(NotReady::Status("gone".into())),
        );
        assert_eq!(ev.map(|e| e.reason), Some(NOT_CONNECTED.to_string()));
    }
}
