//! Test builds only (feature `fault-injection`, never in a shipped binary): a switch that
//! makes the next CreateContainer handlers sleep past their deadline or panic, so that tests
//! can show graft-nri refusing those containers and staying connected.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a handler is made to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Block the handler's thread this long.
    Sleep(Duration),
    /// Panic in the handler.
    Panic,
}

/// Faults queued for the next handler calls, one each.
#[derive(Debug, Clone, Default)]
pub struct FaultSwitch(Arc<Mutex<VecDeque<Fault>>>);

impl FaultSwitch {
    /// Queues `f` for the next handler call.
    pub fn push(&self, f: Fault) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(f);
    }

    /// Called at the start of a handler's work: applies the next queued fault, if any.
    pub fn strike(&self) {
        let next = self.0.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
        match next {
            Some(Fault::Sleep(d)) => std::thread::sleep(d),
            Some(Fault::Panic) => panic!("fault injected by a test"),
            None => {}
        }
    }
}
