//! The count of graft-driver's long-running tasks that ended while they should have run on
//! ([`crate::daemon`]): by task name, a fixed set.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabel {
    task: &'static str,
}

/// `graft_driver_tasks_ended_total{task}`.
#[derive(Default)]
pub(super) struct TaskCounts(Family<TaskLabel, Counter>);

impl TaskCounts {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "graft_driver_tasks_ended",
            "Long-running tasks that ended (returned or panicked) before shutdown, by task; readiness fails after one",
            self.0.clone(),
        );
    }

    pub(super) fn ended(&self, task: &'static str) {
        self.0.get_or_create(&TaskLabel { task }).inc();
    }

    pub(super) fn get(&self, task: &'static str) -> u64 {
        self.0.get_or_create(&TaskLabel { task }).get()
    }
}
