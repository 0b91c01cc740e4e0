use std::time::Duration;

use nix::sys::signal::{raise, Signal as Sig};

use super::*;
use crate::tasks::Daemon;

// Every test that raises a signal is in this one function: a signal reaches every
// handler of the process, and tests run side by side.
#[tokio::test]
async fn signals_begin_a_graceful_shutdown() {
    let mut signals = Signals::install().unwrap();
    let flag = stop_flag().unwrap();

    // SIGTERM: the daemon's tasks stop, and run says which signal it was.
    let mut d = Daemon::new();
    d.spawn("forever", std::future::pending::<()>());
    raise(Sig::SIGTERM).unwrap();
    let stop = tokio::time::timeout(
        Duration::from_secs(5),
        d.run(&mut signals, Duration::from_secs(1)),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(stop, Stop::Terminate);
    assert_eq!(stop.to_string(), "SIGTERM");
    // The flag of a daemon without an async runtime is set by the same signals.
    assert!(flag.load(Ordering::SeqCst));
    flag.store(false, Ordering::SeqCst);

    // SIGINT the same.
    raise(Sig::SIGINT).unwrap();
    let stop = tokio::time::timeout(Duration::from_secs(5), signals.recv())
        .await
        .unwrap();
    assert_eq!(stop, Stop::Interrupt);
    assert!(flag.load(Ordering::SeqCst));

    // No signal, and a task ends: the daemon ends naming it.
    let mut d = Daemon::new();
    d.spawn("publisher", async {});
    let failed = tokio::time::timeout(Duration::from_secs(5), d.until_stopped(&mut signals))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(failed.task, "publisher");
    d.shutdown(Duration::from_secs(1)).await.unwrap();
}
