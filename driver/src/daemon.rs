//! The owner of graft-driver's long-running work: every task that should run until
//! shutdown (the publisher, the rescans, the event posters, the GPU health monitor...) is a
//! named task of one [`Daemon`]. A task that ends before shutdown, by returning or by
//! panicking, is logged at error with its name, counted
//! (`graft_driver_tasks_ended_total{task}`) and fails readiness ([`Ended::check`]): the node
//! would otherwise go on looking healthy while, say, its slices are no longer published.
//! Shutdown cancels one token that every task is raced against, then waits briefly.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::metrics::DriverMetrics;

/// How often a task that watches a thread looks whether the thread ended.
const THREAD_POLL: Duration = Duration::from_millis(500);

/// Whether a task's return is a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ends {
    /// It runs until shutdown: a return is a failure.
    Never,
    /// It may give up on its own (a change watcher whose fallback is polling): only a
    /// panic is a failure.
    MayReturn,
}

/// The tasks that ended before shutdown: what readiness reads.
#[derive(Debug, Clone, Default)]
pub struct Ended(Arc<Mutex<Vec<(&'static str, String)>>>);

impl Ended {
    /// `Err` naming each task that ended, and how, once any did.
    pub fn check(&self) -> Result<(), TasksStopped> {
        let ended = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if ended.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = ended.iter().map(|(t, how)| format!("{t} {how}")).collect();
        Err(TasksStopped(list.join("; ")))
    }

    fn record(&self, task: &'static str, how: String) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((task, how));
    }
}

/// Tasks that ended before shutdown: each one's name and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a task stopped: {0}")]
pub struct TasksStopped(pub String);

/// graft-driver's long-running tasks, and the token that stops them.
pub struct Daemon {
    tasks: JoinSet<()>,
    token: CancellationToken,
    ended: Ended,
    metrics: Arc<DriverMetrics>,
}

impl Daemon {
    /// A daemon with no tasks yet; ends are counted in `metrics`.
    pub fn new(metrics: Arc<DriverMetrics>) -> Self {
        Daemon {
            tasks: JoinSet::new(),
            token: CancellationToken::new(),
            ended: Ended::default(),
            metrics,
        }
    }

    /// What readiness asks (shared: readiness is served before the tasks start).
    pub fn ended(&self) -> Ended {
        self.ended.clone()
    }

    /// Runs `task` until it ends or shutdown; an end before shutdown is a failure.
    pub fn spawn<F>(&mut self, name: &'static str, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.spawn_ending(name, Ends::Never, task);
    }

    /// As [`Daemon::spawn`], with what a return means.
    pub fn spawn_ending<F>(&mut self, name: &'static str, ends: Ends, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let token = self.token.clone();
        let ended = self.ended.clone();
        let metrics = Arc::clone(&self.metrics);
        self.tasks.spawn(async move {
            let outcome = tokio::select! {
                biased;
                _ = token.cancelled() => return,
                r = AssertUnwindSafe(task).catch_unwind() => r,
            };
            if token.is_cancelled() {
                return;
            }
            let how = match outcome {
                Ok(()) if ends == Ends::MayReturn => {
                    tracing::info!(task = name, "task ended");
                    return;
                }
                Ok(()) => "returned".to_string(),
                Err(panic) => format!("panicked: {}", panic_text(panic.as_ref())),
            };
            tracing::error!(
                task = name,
                how,
                "a long-running task ended; readiness fails"
            );
            metrics.task_ended(name);
            ended.record(name, how);
        });
    }

    /// Watches a thread that should run until shutdown (blocking work: NVML events, inotify
    /// reads) as a task of its own: its end or panic counts as the task's.
    pub fn watch_thread(
        &mut self,
        name: &'static str,
        ends: Ends,
        thread: std::thread::JoinHandle<()>,
    ) {
        self.spawn_ending(name, ends, async move {
            // Polled rather than joined on a blocking thread: the runtime would wait for
            // that at exit, and the thread may run until the process ends.
            while !thread.is_finished() {
                tokio::time::sleep(THREAD_POLL).await;
            }
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        });
    }

    /// Stops every task: cancels the token, then waits up to `wait` for them to go.
    pub async fn shutdown(mut self, wait: Duration) {
        self.token.cancel();
        let all = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(wait, all).await.is_err() {
            tracing::warn!("tasks still running at shutdown; aborted");
            self.tasks.abort_all();
        }
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

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
        let metrics = Arc::new(DriverMetrics::default());
        let mut d = Daemon::new(Arc::clone(&metrics));
        let ended = d.ended();
        d.spawn("forever", std::future::pending());
        assert!(ended.check().is_ok());
        d.spawn("returns", async {});
        settle(&ended, true).await;
        let why = ended.check().unwrap_err().to_string();
        assert!(why.contains("returns returned"), "{why}");
        assert_eq!(metrics.tasks_ended("returns"), 1);
        let mut registry = prometheus_client::registry::Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("graft_driver_tasks_ended_total{task=\"returns\"} 1"),
            "{text}"
        );
        d.spawn("panics", async { panic!("boom") });
        for _ in 0..200 {
            if metrics.tasks_ended("panics") == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let why = ended.check().unwrap_err().to_string();
        assert!(why.contains("panics panicked: boom"), "{why}");
        assert_eq!(metrics.tasks_ended("forever"), 0);
        d.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test]
    async fn a_task_that_may_return_does_not_fail_readiness() {
        let metrics = Arc::new(DriverMetrics::default());
        let mut d = Daemon::new(Arc::clone(&metrics));
        let ended = d.ended();
        d.spawn_ending("watcher", Ends::MayReturn, async {});
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(ended.check().is_ok());
        assert_eq!(metrics.tasks_ended("watcher"), 0);
        d.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test]
    async fn a_watched_thread_that_panics_is_counted() {
        let metrics = Arc::new(DriverMetrics::default());
        let mut d = Daemon::new(Arc::clone(&metrics));
        let ended = d.ended();
        let thread = std::thread::spawn(|| panic!("thread boom"));
        d.watch_thread("thread", Ends::Never, thread);
        tokio::time::timeout(Duration::from_secs(5), settle(&ended, true))
            .await
            .unwrap();
        let why = ended.check().unwrap_err().to_string();
        assert!(why.contains("thread panicked: thread boom"), "{why}");
        assert_eq!(metrics.tasks_ended("thread"), 1);
        d.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test]
    async fn shutdown_stops_the_others_without_failing_readiness() {
        let metrics = Arc::new(DriverMetrics::default());
        let mut d = Daemon::new(Arc::clone(&metrics));
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
        let started = std::time::Instant::now();
        d.shutdown(Duration::from_secs(5)).await;
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(a.load(Ordering::SeqCst) && b.load(Ordering::SeqCst));
        assert!(ended.check().is_ok());
        assert_eq!(metrics.tasks_ended("a") + metrics.tasks_ended("b"), 0);
    }
}
