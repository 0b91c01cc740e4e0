use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

/// Ends counted by task name, as a daemon's metric would.
#[derive(Default)]
struct Counts(Mutex<HashMap<&'static str, u64>>);

impl Counts {
    fn get(&self, task: &str) -> u64 {
        let counts = self.0.lock().unwrap();
        counts.get(task).copied().unwrap_or(0)
    }
}

fn counted() -> (Daemon, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let c = Arc::clone(&counts);
    let d = Daemon::new().on_end(Arc::new(move |task| {
        *c.0.lock().unwrap().entry(task).or_default() += 1;
    }));
    (d, counts)
}

/// Panics; its type is `()`, as a task's that panics in the middle of its work.
fn boom() {
    panic!("boom")
}

async fn settle(ended: &Ended, want_err: bool) {
    for _ in 0..200 {
        if ended.check().is_err() == want_err {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_task_that_panics_or_returns_fails_readiness_and_is_counted() {
    let (mut d, counts) = counted();
    let ended = d.ended();
    d.spawn("forever", std::future::pending::<()>());
    assert!(ended.check().is_ok());
    d.spawn("returns", async {});
    settle(&ended, true).await;
    let why = ended.check().unwrap_err().to_string();
    assert!(why.contains("returns returned"), "{why}");
    assert_eq!(counts.get("returns"), 1);
    d.spawn("panics", async { boom() });
    for _ in 0..200 {
        if counts.get("panics") == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let why = ended.check().unwrap_err().to_string();
    assert!(why.contains("panics panicked: boom"), "{why}");
    assert_eq!(counts.get("forever"), 0);
    d.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test]
async fn a_task_that_may_return_does_not_fail_readiness() {
    let (mut d, counts) = counted();
    let ended = d.ended();
    d.spawn_ending("watcher", Ends::MayReturn, async {});
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(ended.check().is_ok());
    assert_eq!(counts.get("watcher"), 0);
    d.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test]
async fn a_watched_thread_that_panics_is_counted() {
    let (mut d, counts) = counted();
    let ended = d.ended();
    let thread = std::thread::spawn(|| panic!("thread boom"));
    d.watch_thread("thread", Ends::Never, thread);
    tokio::time::timeout(Duration::from_secs(5), settle(&ended, true))
        .await
        .unwrap();
    let why = ended.check().unwrap_err().to_string();
    assert!(why.contains("thread panicked: thread boom"), "{why}");
    assert_eq!(counts.get("thread"), 1);
    d.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test]
async fn shutdown_stops_the_others_without_failing_readiness() {
    let (mut d, counts) = counted();
    let ended = d.ended();
    // Set when the task is dropped: cancellation stopped it.
    struct Dropped(Arc<AtomicBool>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let (a, b) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    for (name, flag) in [("a", Arc::clone(&a)), ("b", Arc::clone(&b))] {
        d.spawn(name, async move {
            let _guard = Dropped(flag);
            std::future::pending::<()>().await
        });
    }
    tokio::task::yield_now().await;
    let started = Instant::now();
    d.shutdown(Duration::from_secs(5)).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(a.load(Ordering::SeqCst) && b.load(Ordering::SeqCst));
    assert!(ended.check().is_ok());
    assert_eq!(counts.get("a") + counts.get("b"), 0);
}

#[tokio::test]
async fn a_task_that_ends_early_ends_the_daemon_naming_it() {
    let mut d = Daemon::new();
    d.spawn("forever", std::future::pending::<()>());
    d.spawn("watches", async {
        tokio::time::sleep(Duration::from_millis(20)).await;
    });
    let failed = tokio::time::timeout(Duration::from_secs(5), d.failed())
        .await
        .unwrap();
    assert_eq!(failed.task, "watches");
    assert_eq!(failed.to_string(), "task watches returned");
    // As a daemon's error: the task's name in the one line main prints.
    let e = crate::RuntimeError::from(failed);
    assert_eq!(e.to_string(), "task watches returned");
    d.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test]
async fn a_task_that_returns_an_error_ends_the_daemon_with_its_chain() {
    #[derive(Debug, thiserror::Error)]
    #[error("serving the extender")]
    struct Serving(#[source] std::io::Error);
    let mut d = Daemon::new();
    d.spawn_ending("server", Ends::MayReturn, async {
        Err::<(), _>(Serving(std::io::Error::other("listener closed")))
    });
    let failed = tokio::time::timeout(Duration::from_secs(5), d.failed())
        .await
        .unwrap();
    assert_eq!(
        failed.to_string(),
        "task server failed: serving the extender: listener closed"
    );
    assert!(matches!(failed.how, How::Failed(_)));
    let why = d.ended().check().unwrap_err().to_string();
    assert_eq!(
        why,
        "a task stopped: server failed: serving the extender: listener closed"
    );
    d.shutdown(Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_past_its_deadline_names_the_tasks_left() {
    let mut d = Daemon::new();
    let polled = Arc::new(AtomicU64::new(0));
    let p = Arc::clone(&polled);
    // Blocks its worker: cancellation cannot reach it before the deadline.
    d.spawn("stubborn", async move {
        p.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(700));
    });
    d.spawn("polite", std::future::pending::<()>());
    while polled.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    let late = d.shutdown(Duration::from_millis(100)).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(600), "{late}");
    assert_eq!(late.tasks, ["stubborn"]);
    assert!(late.to_string().contains("aborted: stubborn"), "{late}");
}
