use super::*;
use crate::health::classify::{classify, default_informational, Signal, Verdict};

fn at(s: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(s * 1000 + 300)
}

/// Observes what NVML said, as the monitor does for an event.
fn event(t: &mut Tracker, device: &str, s: Signal, now: SystemTime) -> bool {
    let Verdict::Condition {
        condition,
        reason,
        message,
    } = classify(s, &default_informational())
    else {
        panic!("{s:?} is no condition")
    };
    t.observe(device, condition, &reason, &message, now, true)
}

fn all(_: &str) -> bool {
    true
}

const FINE: Probed = Probed {
    passes: true,
    action: Action::Read(0),
};

fn reason(t: &Tracker, device: &str) -> Option<String> {
    t.report(all).get(device).map(|h| h.reason.clone())
}

#[test]
fn fatal_never_clears_on_time() {
    let mut t = Tracker::new(
        Some(Duration::from_secs(10)),
        Duration::from_secs(5),
        "boot-1",
    );
    assert!(event(&mut t, "gpu-2", Signal::Xid(48), at(100)));
    let h = t.report(all).devices["gpu-2"].clone();
    assert_eq!(h.condition, Condition::Unhealthy);
    assert_eq!(h.reason, "xid-48");
    // Whole seconds: a taint's timeAdded.
    assert_eq!(h.since, SystemTime::UNIX_EPOCH + Duration::from_secs(100));
    assert!(!t.tick(at(1_000_000)));
    // The driver asks for a reset: no probe clears it.
    let reset = Probed {
        passes: true,
        action: Action::Read(1),
    };
    assert!(!t.probed("gpu-2", reset, at(1_000_000), false));
    // A failing probe does not either, action or not.
    let failing = Probed {
        passes: false,
        action: Action::Read(0),
    };
    assert!(!t.probed("gpu-2", failing, at(1_000_000), true));
    assert_eq!(reason(&t, "gpu-2").as_deref(), Some("xid-48"));
    // Action none and a passing probe: cleared.
    assert!(t.probed("gpu-2", FINE, at(1_000_001), false));
    assert!(t.report(all).devices.is_empty());
}

#[test]
fn a_tick_right_after_the_event_waits_for_the_drivers_action() {
    let mut t = Tracker::new(None, Duration::from_secs(5), "boot-1");
    event(&mut t, "gpu-2", Signal::Xid(79), at(100));
    // The driver has not posted its action yet: the field still reads none.
    assert!(!t.probed("gpu-2", FINE, at(101), false));
    assert!(!t.probed("gpu-2", FINE, at(104), false));
    // The same error again restarts the wait.
    assert!(!event(&mut t, "gpu-2", Signal::Xid(79), at(104)));
    assert!(!t.probed("gpu-2", FINE, at(108), false));
    assert!(t.probed("gpu-2", FINE, at(109), false));
    // A recovery-action event saying none needs no wait.
    event(&mut t, "gpu-2", Signal::Xid(79), at(200));
    assert!(t.probed("gpu-2", FINE, at(200), true));
}

#[test]
fn without_a_recovery_action_only_a_reset_clears() {
    let unknown = Probed {
        passes: true,
        action: Action::NotSupported,
    };
    let mut t = Tracker::new(
        Some(Duration::from_secs(10)),
        Duration::from_secs(5),
        "boot-1",
    );
    event(&mut t, "gpu-2", Signal::Xid(79), at(100));
    assert!(!t.probed("gpu-2", unknown, at(10_000), false));
    let kept = t.entries().clone();
    // After a reboot, with the condition kept: the probe passing clears it.
    let mut t = Tracker::new(
        Some(Duration::from_secs(10)),
        Duration::from_secs(5),
        "boot-2",
    );
    t.restore(kept.clone());
    assert_eq!(reason(&t, "gpu-2").as_deref(), Some("xid-79"));
    let failing = Probed {
        passes: false,
        action: Action::NotSupported,
    };
    assert!(!t.probed("gpu-2", failing, at(20_000), false));
    assert!(t.probed("gpu-2", unknown, at(20_000), false));
    // Seen again after the reboot: this boot's now, a reset is needed again.
    let mut t = Tracker::new(None, Duration::from_secs(5), "boot-2");
    t.restore(kept);
    event(&mut t, "gpu-2", Signal::Xid(79), at(20_000));
    assert!(!t.probed("gpu-2", unknown, at(30_000), false));
}

#[test]
fn worse_replaces_milder_and_the_first_reason_stays() {
    let mut t = Tracker::new(Some(Duration::from_secs(10)), Duration::from_secs(5), "b");
    assert!(event(&mut t, "gpu-2", Signal::Xid(13), at(1)));
    assert_eq!(
        t.report(all).devices["gpu-2"].condition,
        Condition::Degraded
    );
    assert!(event(&mut t, "gpu-2", Signal::Xid(79), at(2)));
    assert_eq!(
        t.report(all).devices["gpu-2"].condition,
        Condition::Unhealthy
    );
    assert!(!event(&mut t, "gpu-2", Signal::Xid(13), at(3)));
    // An equal condition of another reason: the root cause stays.
    assert!(!event(&mut t, "gpu-2", Signal::Lost, at(4)));
    assert_eq!(reason(&t, "gpu-2").as_deref(), Some("xid-79"));
}

#[test]
fn degraded_clears_after_the_quiet_time_and_probes_do_not_clear_it() {
    let mut t = Tracker::new(Some(Duration::from_secs(5)), Duration::from_secs(5), "b");
    event(&mut t, "gpu-3", Signal::Xid(13), at(0));
    assert!(!t.probed("gpu-3", FINE, at(1), true));
    assert!(!t.tick(at(4)));
    assert!(t.tick(at(5)));
    assert!(t.report(all).devices.is_empty());
    // Without a quiet time: kept until a reset.
    let mut t = Tracker::new(None, Duration::from_secs(5), "b");
    event(&mut t, "gpu-3", Signal::Xid(13), at(0));
    assert!(!t.tick(at(1_000_000)));
    assert!(!t.probed("gpu-3", FINE, at(1_000_000), true));
}

#[test]
fn probe_findings_hold_until_the_probe_passes() {
    let mut t = Tracker::new(None, Duration::from_secs(5), "b");
    // Found by a probe: no event time to wait after.
    assert!(t.observe(
        "gpu-1",
        Condition::Unhealthy,
        "row-remap-pending",
        "pending",
        at(50),
        false
    ));
    let pending = Probed {
        passes: false,
        action: Action::Read(0),
    };
    assert!(!t.probed("gpu-1", pending, at(51), false));
    assert!(t.probed("gpu-1", FINE, at(52), false));
}

#[test]
fn unpublished_devices_are_kept_unreported_until_a_reboot() {
    let mut t = Tracker::new(None, Duration::from_secs(5), "boot-1");
    event(&mut t, "gpu-6", Signal::RecoveryAction(1), at(0));
    let only_others = |n: &str| n != "gpu-6";
    assert!(t.report(only_others).devices.is_empty());
    assert!(!t.prune(only_others));
    assert_eq!(reason(&t, "gpu-6").as_deref(), Some("reset-required"));
    let kept = t.entries().clone();
    let mut t = Tracker::new(None, Duration::from_secs(5), "boot-2");
    t.restore(kept);
    assert!(t.prune(only_others));
    assert!(t.entries().is_empty());
}
