//! graft-driver's long-running tasks (the publisher, the rescans, the event posters, the GPU
//! health monitor...) are named tasks of one graft-runtime [`Daemon`]. A task that ends
//! before shutdown, by returning or by panicking, is logged at error with its name, counted
//! here (`graft_driver_tasks_ended_total{task}`) and fails readiness ([`Ended::check`]): the
//! node would otherwise go on looking healthy while, say, its slices are no longer
//! published. It does not end graft-driver: the claims already prepared stay served.

use std::sync::Arc;

pub use graft_runtime::tasks::{Daemon, Ended, Ends};
pub use graft_runtime::TasksStopped;

use crate::metrics::DriverMetrics;

/// A daemon with no tasks yet; ends are counted in `metrics`.
pub fn counted(metrics: Arc<DriverMetrics>) -> Daemon {
    Daemon::new().on_end(Arc::new(move |task| metrics.task_ended(task)))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn settle(ended: &Ended, want_err: bool) {
        for _ in 0..200 {
            if ended.check().is_err() == want_err {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Panics; its type is `()`, as a task's that panics in the middle of its work.
    fn boom() {
        panic!("boom")
    }

    // The runtime's own tests (runtime/src/tasks/tests.rs) hold the rest: tasks that may
    // return, watched threads, shutdown.
    #[tokio::test]
    async fn a_task_that_panics_or_returns_fails_readiness_and_is_counted() {
        let metrics = Arc::new(DriverMetrics::default());
        let mut d = counted(Arc::clone(&metrics));
        let ended = d.ended();
        d.spawn("forever", std::future::pending::<()>());
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
        d.spawn("panics", async { boom() });
        for _ in 0..200 {
            if metrics.tasks_ended("panics") == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let why = ended.check().unwrap_err().to_string();
        assert!(why.contains("panics panicked: boom"), "{why}");
        assert_eq!(metrics.tasks_ended("forever"), 0);
        d.shutdown(Duration::from_secs(1)).await.unwrap();
    }
}
