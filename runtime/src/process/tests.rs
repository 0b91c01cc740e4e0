use std::path::PathBuf;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

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

/// An output that keeps what it is given; `gate`: each write first waits on it, so that the
/// output is stuck until its sender is dropped.
struct Output {
    kept: Arc<Mutex<Vec<u8>>>,
    gate: Option<mpsc::Receiver<()>>,
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Some(gate) = &self.gate {
            let _ = gate.recv();
        }
        self.kept.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn lines(kept: &Mutex<Vec<u8>>) -> Vec<String> {
    let kept = kept.lock().unwrap();
    String::from_utf8_lossy(&kept)
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn dropping_the_guard_writes_the_buffered_lines() {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let out = Output {
        kept: kept.clone(),
        gate: None,
    };
    let (mut w, guard) = off_thread(out, LOG_BUFFER_LINES);
    for i in 0..3 {
        w.write_all(format!("line {i}\n").as_bytes()).unwrap();
    }
    drop(guard);
    assert_eq!(lines(&kept), ["line 0", "line 1", "line 2"]);
}

#[test]
fn a_stuck_output_drops_lines_and_never_blocks_the_caller() {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let (open, gate) = mpsc::channel();
    let out = Output {
        kept: kept.clone(),
        gate: Some(gate),
    };
    let (mut w, guard) = off_thread(out, 8);
    let dropped = w.error_counter();
    let began = Instant::now();
    for i in 0..100 {
        w.write_all(format!("line {i}\n").as_bytes()).unwrap();
    }
    // Blocking would have hung here; a few lines' copies take microseconds.
    assert!(began.elapsed() < Duration::from_secs(5));
    // Eight wait, one more may be in the stuck write: the rest were dropped.
    let lost = dropped.dropped_lines();
    assert!((91..=92).contains(&lost), "{lost} dropped");
    drop(open);
    drop(guard);
    let written = lines(&kept);
    assert_eq!(written.len() + lost, 100);
    assert_eq!(written[0], "line 0");
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
