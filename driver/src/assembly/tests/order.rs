//! Start-up's order, and the two clean ends: a signal, and a family's restart request.

use std::time::Duration;

use super::*;

/// What start-up does, in order, with two families (`--discovery char,files,char`: each
/// once) and the pod cache, up to the signal.
const ORDER: &[&str] = &[
    // Liveness answers from the start.
    "probes served",
    // Before the families: a family's failure can be told on the Node.
    "client",
    "open char",
    "open files",
    // graft-nri's injection policy from the families, then the core made with it.
    "injection char",
    "injection files",
    "core made",
    // Each family's work before the first scan, on the checkpoint as the last run left it.
    "before_scan char (checkpoint not settled)",
    "before_scan files (checkpoint not settled)",
    "take_discovery char",
    "take_discovery files",
    "discover char",
    "discover files",
    "restart_when_up char",
    "restart_when_up files",
    "route char",
    "route files",
    // The Event poster and the state-directory watchers before the checkpoint settles...
    "task event-poster",
    "task pod-cache",
    "task nri-events",
    "task refusal-events",
    "checkpoint settled",
    // ... the families' work that reads it after.
    "after_startup char (checkpoint settled)",
    "after_startup files (checkpoint settled)",
    "task claim-counts",
    "task usage-metrics",
    // The families' own tasks, then the rest of graft-driver's.
    "start char",
    "start files",
    "task publisher",
    "task device-metrics",
    "task inotify",
    "task rescan",
    "task cleanup",
    "task writeback-check",
    // The kubelet plugin last, until the signal.
    "plugin serving",
    "plugin stopped",
];

#[tokio::test]
async fn start_up_goes_in_its_order() {
    let f = Fixture::new();
    f.run_until_serving(&["--discovery", "char,files,char", "--pod-cache"])
        .await
        .unwrap();
    assert_eq!(f.world.trail.lines(), ORDER);
    // The corrupt checkpoint was rebuilt, and the Node is told through the running
    // driver's queue (nothing else failed: nothing was told before an exit).
    assert_eq!(f.world.queued(), ["CheckpointRebuilt"]);
}

/// The tasks graft-driver starts of its own, in order, by flag.
const TASKS: &[(&[&str], &[&str])] = &[
    (
        &["--discovery", "char"],
        &[
            "event-poster",
            "nri-events",
            "refusal-events",
            "claim-counts",
            "usage-metrics",
            "publisher",
            "device-metrics",
            "inotify",
            "rescan",
            "cleanup",
            "writeback-check",
        ],
    ),
    (
        &["--discovery", "char", "--pod-cache"],
        &[
            "event-poster",
            "pod-cache",
            "nri-events",
            "refusal-events",
            "claim-counts",
            "usage-metrics",
            "publisher",
            "device-metrics",
            "inotify",
            "rescan",
            "cleanup",
            "writeback-check",
        ],
    ),
    // The device plugin guard is the NVIDIA family's own task, started in its `start`
    // (graft-nvidia's tests/guard.rs); the assembly starts none for it.
    (
        &["--discovery", "nvidia"],
        &[
            "event-poster",
            "nri-events",
            "refusal-events",
            "claim-counts",
            "usage-metrics",
            "publisher",
            "device-metrics",
            "inotify",
            "rescan",
            "cleanup",
            "writeback-check",
        ],
    ),
];

#[tokio::test]
async fn the_optional_tasks_follow_their_flags() {
    for &(flags, want) in TASKS {
        let f = Fixture::new();
        f.run_until_serving(flags).await.unwrap();
        let tasks: Vec<String> = f
            .world
            .trail
            .lines()
            .iter()
            .filter_map(|l| l.strip_prefix("task ").map(String::from))
            .collect();
        assert_eq!(tasks, want, "{flags:?}");
    }
}

#[tokio::test]
async fn a_signal_ends_run_cleanly_and_stops_every_task() {
    let f = Fixture::new();
    // Rescans every second, if the rescan task were still running.
    f.run_until_serving(&["--discovery", "char,files", "--rescan-seconds", "1"])
        .await
        .unwrap();
    let trail = f.world.trail.lines();
    assert_eq!(trail.last().map(String::as_str), Some("plugin stopped"));
    // Stopped before `run` returned: the families' tasks and the Event poster.
    let mut stopped = f.world.stopped.lines();
    stopped.sort();
    assert_eq!(stopped, ["char", "event-poster", "files"]);
    // And graft-driver's own: no rescan comes after.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(f.world.trail.lines(), trail);
}

#[tokio::test]
async fn a_family_up_at_last_has_run_end_cleanly_for_its_restart() {
    let f = Fixture::new().scripted(
        "char",
        Script {
            restart_when_up: true,
            ..Script::default()
        },
    );
    // No signal ever comes: the restart request alone ends `run`.
    f.run(
        &["--discovery", "char", "--rescan-seconds", "1"],
        std::future::pending(),
    )
    .await
    .unwrap();
    let trail = f.world.trail.lines();
    let serving = trail.iter().position(|l| l == "plugin serving").unwrap();
    assert_eq!(
        trail[serving..],
        ["plugin serving", "discover char", "plugin stopped"],
        "the first rescan that finds the family up ends the plugin"
    );
    let stopped = f.world.stopped.lines();
    assert!(stopped.contains(&"char".to_string()), "{stopped:?}");
}
