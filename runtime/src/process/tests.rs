use std::path::PathBuf;

use super::*;

fn argv(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

#[test]
fn a_probe_is_answered_and_anything_else_is_not() {
    let none = tempfile::tempdir().unwrap();
    let socket = none.path().join("absent.sock");
    let socket = socket.to_str().unwrap();
    assert_eq!(
        probe_code(&argv(&["graft-x", "--node-name", "n"]), socket),
        None
    );
    // Nothing answers: not alive.
    assert_eq!(
        probe_code(&argv(&["graft-x", "--probe", "live"]), socket),
        Some(1)
    );
    assert_eq!(
        probe_code(
            &argv(&["graft-x", "--probe=ready", "--health-socket", socket]),
            "/x"
        ),
        Some(1)
    );
    // The probe's own flags are wrong.
    assert_eq!(
        probe_code(&argv(&["graft-x", "--probe", "dead"]), socket),
        Some(2)
    );
}

#[test]
fn a_log_file_that_cannot_be_opened_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("no/such/dir/graft.log");
    let e = init_logs(LogFormat::Text, Some(&path)).unwrap_err();
    assert!(matches!(&e, RuntimeError::LogFile { path: p, .. } if *p == path));
    assert_eq!(
        e.to_string(),
        format!("opening log file {}", path.display())
    );
}

#[test]
fn the_runtime_runs_the_main_future() {
    let here = std::thread::current().id();
    let got = block_on(Workers::Fixed(1), async {
        tokio::task::yield_now().await;
        std::thread::current().id()
    })
    .unwrap();
    // On this thread: the workers run beside it.
    assert_eq!(got, here);
    assert_eq!(block_on(Workers::PerCore, async { 7 }).unwrap(), 7);
}
