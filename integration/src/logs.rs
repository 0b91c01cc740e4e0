//! Daemons' log files, read by tests.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;

/// Waits until the log at `path` contains `needle` and gives the log: graft's daemons write
/// their lines from a log thread of their own, a moment after the event a line tells of.
/// `who` names the daemon in the error.
pub fn wait_for(path: &Path, who: &str, needle: &str, limit: Duration) -> anyhow::Result<String> {
    let start = Instant::now();
    loop {
        let t = std::fs::read_to_string(path).unwrap_or_default();
        if t.contains(needle) {
            return Ok(t);
        }
        if start.elapsed() > limit {
            bail!("{needle:?} not in {who}'s log after {limit:?}:\n{t}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
