//! Warning Events on the Node about graft-driver's own state, where `kubectl describe node`
//! shows them: devices.toml refused ([`DEVICE_CONFIG_INVALID`]), the checkpoint rebuilt
//! after it failed its checks ([`CHECKPOINT_REBUILT`]), graft-hook not installed
//! ([`HOOK_INSTALL_FAILED`]), the state directory's disk failing its write-back check
//! ([`STATE_DISK_FAILED`]). A start-up failure ends the process, so its Event is posted
//! at once ([`post_before_exit`]) rather than queued.

use std::error::Error as StdError;
use std::time::Duration;

use kube::runtime::events::{Event, EventType, Recorder};

use super::post::{bounded_note, node_ref};
use crate::claims::Rebuilt;
use crate::error::{BackendError, DriverError};

/// The start-up step that installs graft-hook (the family that needs it names its step
/// so), whose failure gets an Event of its own ([`HOOK_INSTALL_FAILED`]).
pub const INSTALLING_HOOK: &str = "installing graft-hook";

/// devices.toml is unreadable or refused (at start-up, or after an edit).
pub const DEVICE_CONFIG_INVALID: &str = "DeviceConfigInvalid";
/// The checkpoint failed its checks at start-up and was rebuilt.
pub const CHECKPOINT_REBUILT: &str = "CheckpointRebuilt";
/// graft-hook could not be installed at start-up.
pub const HOOK_INSTALL_FAILED: &str = "HookInstallFailed";
/// The state directory's disk failed a write-back check: no claim is prepared meanwhile.
pub const STATE_DISK_FAILED: &str = "StateDiskFailed";
/// How long a start-up failure's Event may take before the process exits anyway.
pub const BEFORE_EXIT: Duration = Duration::from_secs(5);

fn warning(reason: &str, action: &str, note: String) -> Event {
    Event {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    }
}

/// The Event for devices.toml refused by a running backend's scan: the file's error
/// (path, entry or line, and why) and what stays published meanwhile.
pub fn config_invalid(backend: &str, error: &str, kept: usize) -> Event {
    warning(
        DEVICE_CONFIG_INVALID,
        "LoadDeviceConfig",
        format!(
            "{error}; the {backend} backend keeps its last {kept} device(s) published until \
             the file is fixed (it is read again when it changes)"
        ),
    )
}

/// The Event for a start-up that failed on devices.toml or graft-hook's install, found in
/// `err`'s chain; `None` for any other failure (the pod's log and restarts say those).
pub fn startup_failure(err: &(dyn StdError + 'static)) -> Option<Event> {
    let mut cur = Some(err);
    while let Some(e) = cur {
        let config = e.downcast_ref::<DriverError>().or(match e.downcast_ref() {
            Some(BackendError::Discovery(d)) => Some(d),
            _ => None,
        });
        if let Some(d) = config.filter(|d| d.is_device_config()) {
            return Some(warning(
                DEVICE_CONFIG_INVALID,
                "LoadDeviceConfig",
                format!(
                    "{d}; graft-driver cannot start until the file is fixed (it restarts and \
                     reads it again)"
                ),
            ));
        }
        if let Some(BackendError::Step { what, source, .. }) = e.downcast_ref() {
            if *what == INSTALLING_HOOK {
                return Some(warning(
                    HOOK_INSTALL_FAILED,
                    "InstallHook",
                    format!(
                        "{what}: {}; GPU containers need it, so graft-driver cannot start \
                         (it restarts and tries again)",
                        chain(source.as_ref())
                    ),
                ));
            }
        }
        cur = e.source();
    }
    None
}

/// The Event for a write-back check of the state directory's disk that failed: `error`
/// names the directory and the failing call.
pub fn state_disk_failed(error: &str) -> Event {
    warning(
        STATE_DISK_FAILED,
        "CheckStateDisk",
        format!(
            "{error}; graft-driver prepares no claim on this node until a later check (every              few seconds) writes and syncs a probe file there"
        ),
    )
}

/// The Event for a checkpoint rebuilt at start-up: why, and what was kept or lost.
pub fn checkpoint_rebuilt(r: &Rebuilt) -> Event {
    let what = if r.from_earlier_boot {
        format!(
            "it was written before this boot, so its claims were over: started empty, {} \
             claim record(s) of the earlier boot removed",
            r.removed
        )
    } else {
        format!(
            "rebuilt from the claim records: {} claim(s) kept as prepared; the setups they \
             had (VFIO bindings, time-slicing, MIG instances, MPS shares) are not in the \
             records, so unpreparing them cannot undo those{}",
            r.rebuilt,
            if r.removed > 0 {
                format!("; {} unreadable record(s) removed", r.removed)
            } else {
                String::new()
            }
        )
    };
    warning(
        CHECKPOINT_REBUILT,
        "SettleCheckpoint",
        format!(
            "the prepare checkpoint failed its checks ({}); its files were moved aside ({}); {what}",
            r.reason,
            r.moved_to.display()
        ),
    )
}

/// Posts `ev` on `node` now, waiting at most [`BEFORE_EXIT`]: the process is about to end,
/// so a queue would lose it. Failing to post is logged, never more.
pub async fn post_before_exit(recorder: &Recorder, node: &str, ev: Event) {
    let mut ev = ev;
    ev.note = ev.note.map(bounded_note);
    match tokio::time::timeout(BEFORE_EXIT, recorder.publish(&ev, &node_ref(node))).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, reason = ev.reason, "cannot post an Event"),
        Err(_) => tracing::warn!(reason = ev.reason, "posting an Event timed out"),
    }
}

/// An error and its sources, as one line.
fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

#[cfg(test)]
mod tests;
