//! CreateContainer's record reads: on a blocking thread, with a deadline, and bounded.
//!
//! A read that cannot finish (a record on a stuck filesystem) keeps its blocking thread
//! however the caller gives up on it. Each one still running past its deadline is counted,
//! per pod and in all: while one pod has [`MAX_OVERDUE_PER_POD`] overdue reads, that pod's
//! next containers are refused without starting another, and while [`MAX_OVERDUE`] are
//! overdue node-wide, every read is refused. So retries of one broken record never use up
//! the runtime's blocking pool, which the other pods' reads need.
//!
//! Handing a read to a blocking thread and back costs two thread wake-ups, tens of
//! microseconds on an idle node, more than the read itself. So one read at a time runs as a
//! task of its own on the calling worker thread (tokio runs a task spawned from a worker
//! next, on that worker, with no wake-up), while the handler waits for it with the same
//! deadline. Should that read hang, it holds one worker thread and the inline slot: the
//! other worker still runs the runtime and the handler's deadline, and every later read goes
//! to the blocking pool until it returns. Only on a multi-threaded runtime with two workers
//! or more; elsewhere every read goes to the blocking pool.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinError;

use graft_nri_sdk::guard::{effective_deadline, DEFAULT_DEADLINE};

/// Reads past their deadline, node-wide, beyond which no new read starts.
pub const MAX_OVERDUE: usize = 32;
/// Reads past their deadline for one pod, beyond which none starts for that pod.
pub const MAX_OVERDUE_PER_POD: usize = 4;

#[derive(Debug, Default)]
struct Counts {
    by_pod: HashMap<String, usize>,
    total: usize,
}

/// The overdue reads of this graft-nri, and how long a read may take.
#[derive(Debug, Clone)]
pub struct Reads {
    overdue: Arc<Mutex<Counts>>,
    /// The CreateContainer deadline asked for, and the one in force once the runtime said
    /// its own timeout (milliseconds; 0 until then).
    wanted: Duration,
    in_force_ms: Arc<AtomicU64>,
    /// Whether a read runs inline now (module documentation).
    inline_busy: Arc<AtomicBool>,
}

/// Frees the inline slot when the inline read returns (or panics).
struct InlineSlot(Arc<AtomicBool>);

impl Drop for InlineSlot {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Default for Reads {
    fn default() -> Self {
        Reads::new(DEFAULT_DEADLINE)
    }
}

/// Why a read was not waited for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// This read missed its deadline (the deadline in force).
    #[error(
        "graft-nri could not read and check this pod's graft records within its deadline of \
         {0:?} (is the state directory on a stuck filesystem?)"
    )]
    TimedOut(Duration),
    /// At least [`MAX_OVERDUE_PER_POD`] of this pod's reads are overdue.
    #[error(
        "earlier reads of this pod's graft records have not returned; refused without \
         starting another"
    )]
    PodOverdue,
    /// At least [`MAX_OVERDUE`] reads are overdue node-wide (the count).
    #[error(
        "{0} reads of graft records have not returned (is the state directory on a stuck \
         filesystem?); refused without starting another"
    )]
    NodeOverdue(usize),
}

/// One read's progress, shared by the reader thread and the waiter.
#[derive(Debug, Default)]
struct Progress {
    done: bool,
    overdue: bool,
}

impl Reads {
    /// Reads for a plugin whose CreateContainer handlers must answer within `deadline`.
    pub fn new(deadline: Duration) -> Self {
        Reads {
            overdue: Arc::default(),
            wanted: deadline,
            in_force_ms: Arc::default(),
            inline_busy: Arc::default(),
        }
    }

    /// The inline slot, when it is free and the runtime has a second worker to keep going
    /// should the read hang.
    fn inline_slot(&self) -> Option<InlineSlot> {
        let rt = tokio::runtime::Handle::try_current().ok()?;
        if rt.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread
            || rt.metrics().num_workers() < 2
        {
            return None;
        }
        self.inline_busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| InlineSlot(self.inline_busy.clone()))
    }

    /// The runtime's request timeout (Configure), which may lower the deadline.
    pub fn configured(&self, request_timeout_ms: i64) {
        let d = effective_deadline(self.wanted, request_timeout_ms);
        self.in_force_ms
            .store(d.as_millis().max(1) as u64, Ordering::Relaxed);
    }

    /// How long a CreateContainer waits for its records: three quarters of the handler
    /// deadline, so that a read that hangs is refused with its own reason.
    pub fn limit(&self) -> Duration {
        let d = match self.in_force_ms.load(Ordering::Relaxed) {
            0 => self.wanted,
            ms => Duration::from_millis(ms),
        };
        d * 3 / 4
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.overdue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads still running past their deadline, node-wide.
    pub fn overdue(&self) -> usize {
        self.counts().total
    }

    /// Runs `read` for pod `pod_uid`, inline or on a blocking thread (module
    /// documentation), and waits at most `limit`.
    pub async fn run<T: Send + 'static>(
        &self,
        pod_uid: &str,
        limit: Duration,
        read: impl FnOnce() -> T + Send + 'static,
    ) -> Result<Result<T, JoinError>, ReadError> {
        {
            let c = self.counts();
            if c.total >= MAX_OVERDUE {
                return Err(ReadError::NodeOverdue(c.total));
            }
            if c.by_pod
                .get(pod_uid)
                .is_some_and(|n| *n >= MAX_OVERDUE_PER_POD)
            {
                return Err(ReadError::PodOverdue);
            }
        }
        let progress = Arc::new(Mutex::new(Progress::default()));
        let (mine, reads, pod) = (progress.clone(), self.clone(), pod_uid.to_string());
        let body = move || {
            let out = read();
            // Lock order everywhere: the read's progress, then the counts.
            let mut p = mine.lock().unwrap_or_else(|p| p.into_inner());
            p.done = true;
            if p.overdue {
                let mut c = reads.counts();
                c.total = c.total.saturating_sub(1);
                if let Some(n) = c.by_pod.get_mut(&pod) {
                    *n -= 1;
                    if *n == 0 {
                        c.by_pod.remove(&pod);
                    }
                }
            }
            out
        };
        let task = match self.inline_slot() {
            Some(slot) => tokio::spawn(async move {
                let _slot = slot;
                body()
            }),
            None => tokio::task::spawn_blocking(body),
        };
        match tokio::time::timeout(limit, task).await {
            Ok(r) => Ok(r),
            Err(_) => {
                let mut p = progress.lock().unwrap_or_else(|p| p.into_inner());
                if !p.done {
                    p.overdue = true;
                    let mut c = self.counts();
                    c.total += 1;
                    *c.by_pod.entry(pod_uid.to_string()).or_default() += 1;
                }
                Err(ReadError::TimedOut(limit))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hung_read_refuses_its_pod_only_and_is_not_retried() {
        let reads = Reads::default();
        let (release, hang) = mpsc::channel::<()>();
        let hang = Arc::new(Mutex::new(hang));
        let ms = Duration::from_millis(50);
        for _ in 0..MAX_OVERDUE_PER_POD {
            let h = hang.clone();
            let e = reads
                .run("p", ms, move || h.lock().unwrap().recv().ok())
                .await
                .unwrap_err();
            assert_eq!(e, ReadError::TimedOut(ms));
        }
        assert_eq!(reads.overdue(), MAX_OVERDUE_PER_POD);
        assert_eq!(
            reads.run("p", ms, || ()).await.unwrap_err(),
            ReadError::PodOverdue
        );
        assert_eq!(reads.run("q", ms, || 7).await.unwrap().unwrap(), 7);
        drop(release);
        for _ in 0..100 {
            if reads.overdue() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(reads.overdue(), 0);
        assert!(reads.run("p", ms, || ()).await.is_ok());
    }

    /// A read that hangs inline holds one worker and the inline slot: its deadline still
    /// fires, later reads run on the blocking pool and answer, and the slot comes back once
    /// the read returns.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_hung_inline_keeps_its_deadline_and_the_runtime() {
        let reads = Reads::default();
        let r = reads.clone();
        // From a worker thread, as the plugin's handlers run.
        let ran_inline = tokio::spawn(async move {
            let r2 = r.clone();
            let busy = r.run("p", Duration::from_secs(1), move || {
                r2.inline_busy.load(Ordering::Relaxed)
            });
            busy.await.unwrap().unwrap()
        });
        assert!(ran_inline.await.unwrap(), "the first read runs inline");
        assert!(!reads.inline_busy.load(Ordering::Relaxed));

        let (release, hang) = mpsc::channel::<()>();
        let r = reads.clone();
        let started = std::time::Instant::now();
        let hung = tokio::spawn(async move {
            r.run("p", Duration::from_millis(100), move || hang.recv().ok())
                .await
                .unwrap_err()
        });
        assert_eq!(
            hung.await.unwrap(),
            ReadError::TimedOut(Duration::from_millis(100))
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(
            reads.inline_busy.load(Ordering::Relaxed),
            "the hung read holds the slot"
        );
        let r = reads.clone();
        let other = tokio::spawn(async move { r.run("q", Duration::from_secs(1), || 7).await });
        assert_eq!(other.await.unwrap().unwrap().unwrap(), 7);
        drop(release);
        for _ in 0..100 {
            if !reads.inline_busy.load(Ordering::Relaxed) && reads.overdue() == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!reads.inline_busy.load(Ordering::Relaxed) && reads.overdue() == 0);
    }

    #[test]
    fn the_limit_follows_the_deadline_in_force() {
        let reads = Reads::new(Duration::from_secs(1));
        assert_eq!(reads.limit(), Duration::from_millis(750));
        // A runtime timeout of 1 s lowers the deadline to 500 ms.
        reads.configured(1000);
        assert_eq!(reads.limit(), Duration::from_millis(375));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn too_many_hung_reads_stop_all_new_ones() {
        let reads = Reads::default();
        let (release, hang) = mpsc::channel::<()>();
        let hang = Arc::new(Mutex::new(hang));
        for i in 0..MAX_OVERDUE {
            let h = hang.clone();
            let r = reads
                .run(&format!("p{i}"), Duration::from_millis(5), move || {
                    h.lock().unwrap().recv().ok()
                })
                .await;
            assert!(matches!(r, Err(ReadError::TimedOut(_))));
        }
        assert_eq!(
            reads
                .run("other", Duration::from_secs(1), || ())
                .await
                .unwrap_err(),
            ReadError::NodeOverdue(MAX_OVERDUE)
        );
        drop(release);
    }
}
