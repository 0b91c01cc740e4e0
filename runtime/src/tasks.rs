//! The owner of a daemon's long-running work: every task that should run until shutdown is
//! a named task of one [`Daemon`]. A task that ends before shutdown, by returning, by
//! returning an error or by panicking, is logged at error with its name, counted (the
//! daemon's [`Daemon::on_end`] hook), fails readiness ([`Ended::check`]) and is reported to
//! [`Daemon::until_stopped`], so that a daemon that cannot go on without it ends naming it.
//! Nothing is lost silently: a node would otherwise go on looking healthy while, say, its
//! slices are no longer published. Shutdown cancels one token that every task is raced
//! against, then waits up to a deadline; tasks still running then are named and aborted.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::mpsc;
use tokio::task::{Id, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::error::{How, ShutdownOverdue, TaskFailed, TasksStopped};
use crate::signals::{Signals, Stop};

/// How often a task that watches a thread looks whether the thread ended.
const THREAD_POLL: Duration = Duration::from_millis(500);

/// Whether a task's return is a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ends {
    /// It runs until shutdown: a return is a failure.
    Never,
    /// It may give up on its own (a change watcher whose fallback is polling): only a
    /// panic or an error is a failure.
    MayReturn,
}

/// What a task's future gives when it ends: nothing, or a `Result` whose error is a failure
/// whatever [`Ends`] says.
pub trait Outcome: Send + 'static {
    /// The error, when it ended with one.
    fn into_error(self) -> Option<Box<dyn std::error::Error + Send + Sync>>;
}

impl Outcome for () {
    fn into_error(self) -> Option<Box<dyn std::error::Error + Send + Sync>> {
        None
    }
}

impl<E> Outcome for Result<(), E>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    fn into_error(self) -> Option<Box<dyn std::error::Error + Send + Sync>> {
        self.err().map(Into::into)
    }
}

/// The tasks that ended before shutdown: what readiness reads.
#[derive(Debug, Clone, Default)]
pub struct Ended(Arc<Mutex<Vec<(&'static str, String)>>>);

impl Ended {
    /// `Err` naming each task that ended, and how, once any did.
    pub fn check(&self) -> Result<(), TasksStopped> {
        let ended = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if ended.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = ended.iter().map(|(t, how)| format!("{t} {how}")).collect();
        Err(TasksStopped(list.join("; ")))
    }

    fn record(&self, task: &'static str, how: String) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((task, how));
    }
}

/// Called with a task's name each time one ends before shutdown (a daemon's counter).
pub type OnEnd = Arc<dyn Fn(&'static str) + Send + Sync>;

/// A daemon's long-running tasks, and the token that stops them.
pub struct Daemon {
    tasks: JoinSet<()>,
    names: HashMap<Id, &'static str>,
    token: CancellationToken,
    ended: Ended,
    on_end: Option<OnEnd>,
    failed_tx: mpsc::UnboundedSender<TaskFailed>,
    failed_rx: mpsc::UnboundedReceiver<TaskFailed>,
}

impl Default for Daemon {
    fn default() -> Self {
        Self::new()
    }
}

impl Daemon {
    /// A daemon with no tasks yet.
    pub fn new() -> Self {
        let (failed_tx, failed_rx) = mpsc::unbounded_channel();
        Daemon {
            tasks: JoinSet::new(),
            names: HashMap::new(),
            token: CancellationToken::new(),
            ended: Ended::default(),
            on_end: None,
            failed_tx,
            failed_rx,
        }
    }

    /// Calls `count` with the task's name whenever a task ends before shutdown.
    pub fn on_end(mut self, count: OnEnd) -> Self {
        self.on_end = Some(count);
        self
    }

    /// What readiness asks (shared: readiness is served before the tasks start).
    pub fn ended(&self) -> Ended {
        self.ended.clone()
    }

    /// Runs `task` until it ends or shutdown; an end before shutdown is a failure.
    pub fn spawn<F>(&mut self, name: &'static str, task: F)
    where
        F: Future + Send + 'static,
        F::Output: Outcome,
    {
        self.spawn_ending(name, Ends::Never, task);
    }

    /// As [`Daemon::spawn`], with what a return means.
    pub fn spawn_ending<F>(&mut self, name: &'static str, ends: Ends, task: F)
    where
        F: Future + Send + 'static,
        F::Output: Outcome,
    {
        let token = self.token.clone();
        let ended = self.ended.clone();
        let on_end = self.on_end.clone();
        let failed = self.failed_tx.clone();
        let handle = self.tasks.spawn(async move {
            let outcome = tokio::select! {
                biased;
                _ = token.cancelled() => return,
                r = AssertUnwindSafe(task).catch_unwind() => r,
            };
            if token.is_cancelled() {
                return;
            }
            let how = match outcome.map(Outcome::into_error) {
                Ok(None) if ends == Ends::MayReturn => {
                    tracing::info!(task = name, "task ended");
                    return;
                }
                Ok(None) => How::Returned,
                Ok(Some(e)) => How::Failed(e),
                Err(panic) => How::Panicked(panic_text(panic.as_ref())),
            };
            tracing::error!(
                task = name,
                how = %how,
                "a long-running task ended; readiness fails"
            );
            if let Some(count) = &on_end {
                count(name);
            }
            ended.record(name, how.to_string());
            // Nobody listening (a daemon that only fails readiness) is fine.
            let _ = failed.send(TaskFailed { task: name, how });
        });
        self.names.insert(handle.id(), name);
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

    /// The first task to end before shutdown (after any already reported).
    pub async fn failed(&mut self) -> TaskFailed {
        match self.failed_rx.recv().await {
            Some(f) => f,
            // Never: the daemon holds a sender.
            None => std::future::pending().await,
        }
    }

    /// Waits for a signal (`Ok`: shutdown begins) or a task's end before shutdown (`Err`,
    /// naming it: a daemon that cannot go on without its tasks ends with it).
    pub async fn until_stopped(&mut self, signals: &mut Signals) -> Result<Stop, TaskFailed> {
        tokio::select! {
            stop = signals.recv() => Ok(stop),
            failed = self.failed() => Err(failed),
        }
    }

    /// [`Daemon::until_stopped`], then [`Daemon::shutdown`] within `wait`: what a daemon
    /// whose work is all in its tasks runs. Tasks overdue at shutdown are logged, not an
    /// error: the process stops either way.
    pub async fn run(mut self, signals: &mut Signals, wait: Duration) -> Result<Stop, TaskFailed> {
        let stopped = self.until_stopped(signals).await;
        let _overdue = self.shutdown(wait).await;
        stopped
    }

    /// Stops every task: cancels the token, then waits up to `wait` for them to go; those
    /// still running then are aborted, logged at warn and named in the error.
    pub async fn shutdown(mut self, wait: Duration) -> Result<(), ShutdownOverdue> {
        self.token.cancel();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.tasks.join_next_with_id()).await {
                Ok(Some(Ok((id, ())))) => {
                    self.names.remove(&id);
                }
                Ok(Some(Err(e))) => {
                    self.names.remove(&e.id());
                }
                Ok(None) => return Ok(()),
                Err(_) => break,
            }
        }
        let mut tasks: Vec<&'static str> = self.names.values().copied().collect();
        tasks.sort_unstable();
        tracing::warn!(?tasks, "tasks still running at shutdown; aborted");
        self.tasks.abort_all();
        Err(ShutdownOverdue { tasks, wait })
    }
}

/// A panic's message, when it has one.
pub fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    }
}

#[cfg(test)]
mod tests;
