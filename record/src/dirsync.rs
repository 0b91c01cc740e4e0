//! Group directory syncs: the record store's writers rename their files into one
//! directory, and each must return only once its rename is durable. One `fsync` of the
//! directory that starts after a rename covers it, and every other rename made before it
//! started, so callers that arrive while a sync runs share the next one instead of each
//! paying their own: under a burst of prepares the directory is synced about once per
//! disk round trip, not once per claim.

use std::path::Path;
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::atomic::sync_dir;
use crate::error::{RecordError, Result};

#[derive(Debug, Default)]
struct State {
    /// Syncs started so far; the one running, if any, is number `started`.
    started: u64,
    /// The highest sync number that has finished.
    finished: u64,
    running: bool,
    /// The last failed sync's number and its error: callers that needed it fail too.
    failed: Option<(u64, String)>,
}

/// Shares directory syncs among concurrent callers (one per directory).
#[derive(Debug, Default)]
pub struct GroupSync {
    state: Mutex<State>,
    done: Condvar,
}

impl GroupSync {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Returns once a sync of `dir` that started after this call began has succeeded:
    /// whatever the caller renamed or removed in `dir` before calling is then durable.
    /// Blocking: call from a blocking thread.
    pub fn sync(&self, dir: &Path) -> Result<()> {
        let mut s = self.lock();
        // A sync already running may have started before the caller's change.
        let need = s.started + 1;
        loop {
            if s.finished >= need {
                return match &s.failed {
                    Some((n, why)) if *n >= need => Err(RecordError::io(
                        "fsync",
                        dir,
                        std::io::Error::other(why.clone()),
                    )),
                    _ => Ok(()),
                };
            }
            if !s.running {
                s.started += 1;
                s.running = true;
                let mine = s.started;
                drop(s);
                let out = sync_dir(dir);
                s = self.lock();
                s.running = false;
                s.finished = mine;
                if let Err(e) = &out {
                    s.failed = Some((mine, e.to_string()));
                }
                self.done.notify_all();
                // `mine >= need`: this caller's own sync decides its answer.
                return out;
            }
            s = self.done.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn every_caller_returns_after_a_sync_and_concurrent_ones_share_them() {
        let dir = tempfile::tempdir().unwrap();
        let g = Arc::new(GroupSync::default());
        let threads: Vec<_> = (0..32)
            .map(|_| {
                let (g, d) = (g.clone(), dir.path().to_path_buf());
                std::thread::spawn(move || g.sync(&d))
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        let s = g.lock();
        assert!(!s.running);
        assert_eq!(s.started, s.finished);
        assert!(s.started >= 1 && s.started <= 32, "{}", s.started);
    }

    #[test]
    fn a_failed_sync_fails_its_callers_and_the_next_one_tries_again() {
        let dir = tempfile::tempdir().unwrap();
        let g = GroupSync::default();
        let gone = dir.path().join("gone");
        assert!(g.sync(&gone).is_err());
        assert!(g.sync(dir.path()).is_ok());
    }

    #[test]
    fn a_caller_never_counts_a_sync_that_started_before_it() {
        let g = GroupSync::default();
        {
            // A sync running (number 1) when the caller arrives.
            let mut s = g.lock();
            s.started = 1;
            s.running = true;
        }
        let dir = tempfile::tempdir().unwrap();
        std::thread::scope(|sc| {
            let waiter = sc.spawn(|| g.sync(dir.path()));
            std::thread::sleep(std::time::Duration::from_millis(50));
            {
                let mut s = g.lock();
                s.running = false;
                s.finished = 1;
                g.done.notify_all();
            }
            waiter.join().unwrap().unwrap();
        });
        // The caller ran a sync of its own after number 1.
        assert_eq!(g.lock().finished, 2);
    }
}
