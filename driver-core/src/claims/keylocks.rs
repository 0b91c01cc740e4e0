//! Locks by name: what serialises the work on one device (two claims sharing a GPU are set
//! up one after the other) and on one claim (a retried prepare waits for the one still
//! running in the background), while work on other devices and claims goes on in
//! parallel. A set of keys is taken all at once or not at all, so two callers holding
//! overlapping sets cannot deadlock.

use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// Named locks; see the module's note.
#[derive(Debug, Default)]
pub struct KeyLocks {
    held: Mutex<HashSet<String>>,
    freed: Condvar,
}

/// Holds its keys until dropped.
#[derive(Debug)]
pub struct KeyGuard {
    locks: Arc<KeyLocks>,
    keys: Vec<String>,
}

impl KeyLocks {
    /// No key held.
    pub fn new() -> Arc<Self> {
        Arc::new(KeyLocks::default())
    }

    /// Takes every key of `keys` once none of them is held, waiting until `deadline`.
    /// `None` when the deadline passes first.
    pub fn acquire(self: &Arc<Self>, keys: &[String], deadline: Instant) -> Option<KeyGuard> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if keys.iter().all(|k| !held.contains(k)) {
                held.extend(keys.iter().cloned());
                return Some(KeyGuard {
                    locks: Arc::clone(self),
                    keys: keys.to_vec(),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            held = self
                .freed
                .wait_timeout(held, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Whether `key` is held now.
    pub fn is_held(&self, key: &str) -> bool {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(key)
    }
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        let mut held = self.locks.held.lock().unwrap_or_else(|p| p.into_inner());
        for k in &self.keys {
            held.remove(k);
        }
        self.locks.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn keys(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn disjoint_sets_go_together_overlapping_ones_wait() {
        let l = KeyLocks::new();
        let soon = || Instant::now() + Duration::from_millis(50);
        let a = l.acquire(&keys(&["gpu-0", "gpu-1"]), soon()).unwrap();
        let b = l.acquire(&keys(&["fuse"]), soon()).unwrap();
        assert!(l.acquire(&keys(&["gpu-1", "tun"]), soon()).is_none());
        // Nothing of a failed acquire is held.
        assert!(!l.is_held("tun"));
        let l2 = Arc::clone(&l);
        let waiter = std::thread::spawn(move || {
            l2.acquire(&keys(&["gpu-1"]), Instant::now() + Duration::from_secs(5))
                .is_some()
        });
        std::thread::sleep(Duration::from_millis(50));
        drop(a);
        assert!(waiter.join().unwrap());
        drop(b);
        assert!(!l.is_held("fuse"));
    }
}
