//! Fail closed: every plugin handler answers within the plugin's own deadline, and a panic
//! in a handler becomes an error reply.
//!
//! The runtime drops a plugin whose reply is late (containerd: 2 s by default) or whose
//! connection breaks, and then creates containers without it: for a plugin that injects
//! devices that means containers start without them. An error reply instead fails just that
//! request (for CreateContainer, the container is refused and the kubelet retries) and keeps
//! the plugin connected.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures::FutureExt as _;
use ttrpc::Code;

/// Default deadline for one handler: well below containerd's default request timeout.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(1);

/// The deadline to use given the plugin's wish and what the runtime said in Configure
/// (zero: it did not say). A deadline that would not leave the runtime time to receive the
/// reply is lowered to half the runtime's timeout, with a warning.
pub fn effective_deadline(wanted: Duration, runtime_timeout_ms: i64) -> Duration {
    if runtime_timeout_ms <= 0 {
        return wanted;
    }
    let runtime = Duration::from_millis(runtime_timeout_ms as u64);
    let cap = runtime / 2;
    if wanted > cap {
        tracing::warn!(
            wanted_ms = wanted.as_millis() as u64,
            runtime_timeout_ms,
            using_ms = cap.as_millis() as u64,
            "the plugin's handler deadline is not well below the runtime's request timeout; \
             lowering it"
        );
        cap
    } else {
        wanted
    }
}

/// Runs `fut` with a deadline and turns a panic into an error. `what` names the request in
/// the error (e.g. `CreateContainer of container "app" of pod ns/pod`).
pub async fn guarded<T, F>(what: &str, deadline: Duration, fut: F) -> ttrpc::Result<T>
where
    F: Future<Output = ttrpc::Result<T>>,
{
    match tokio::time::timeout(deadline, AssertUnwindSafe(fut).catch_unwind()).await {
        Ok(Ok(result)) => result,
        Ok(Err(panic)) => {
            let msg = panic_message(&*panic);
            tracing::error!(request = what, panic = msg, "handler panicked; refusing");
            Err(status(
                Code::INTERNAL,
                format!("{what}: the plugin failed internally ({msg}); refused"),
            ))
        }
        Err(_) => {
            tracing::error!(
                request = what,
                deadline_ms = deadline.as_millis() as u64,
                "handler missed its deadline; refusing"
            );
            Err(status(
                Code::DEADLINE_EXCEEDED,
                format!(
                    "{what}: not answered within the plugin's deadline of {deadline:?}; refused"
                ),
            ))
        }
    }
}

/// Spawns `fut` as a task of its own whose panic, should it end in one, is logged at error
/// with `what`. For work nobody awaits (a handler must not await
/// [`crate::Runtime::update_containers`]): its panic would otherwise go unseen.
pub fn spawn_logged<F>(what: &'static str, fut: F) -> tokio::task::JoinHandle<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(panic) = AssertUnwindSafe(fut).catch_unwind().await {
            let msg = panic_message(&*panic);
            tracing::error!(task = what, panic = msg, "task panicked");
        }
    })
}

/// The text of a panic payload.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

fn status(code: Code, msg: String) -> ttrpc::Error {
    ttrpc::Error::RpcStatus(ttrpc::get_status(code, msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_stays_below_the_runtime_timeout() {
        let want = Duration::from_secs(1);
        assert_eq!(effective_deadline(want, 0), want);
        assert_eq!(effective_deadline(want, 2000), want);
        assert_eq!(effective_deadline(want, 1500), Duration::from_millis(750));
        assert_eq!(effective_deadline(Duration::from_secs(3), 2000), want);
    }

    #[tokio::test]
    async fn late_and_panicking_handlers_become_errors() {
        let d = Duration::from_millis(50);
        let ok: ttrpc::Result<u8> = guarded("x", d, async { Ok(1) }).await;
        assert_eq!(ok.unwrap(), 1);
        let late: ttrpc::Result<u8> = guarded("CreateContainer of c", d, async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(1)
        })
        .await;
        let e = late.unwrap_err().to_string();
        assert!(
            e.contains("CreateContainer of c") && e.contains("deadline"),
            "{e}"
        );
        let boom: ttrpc::Result<u8> = guarded("x", d, async { panic!("boom {}", 7) }).await;
        let e = boom.unwrap_err().to_string();
        assert!(e.contains("boom 7"), "{e}");
    }

    #[tokio::test]
    async fn a_spawned_task_that_panics_is_caught() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let t = spawn_logged("test", async move {
            let _tx = tx;
            panic!("bug");
        });
        // The panic was caught (and logged): the task itself ends normally.
        t.await.unwrap();
        assert!(rx.await.is_err());
    }
}
