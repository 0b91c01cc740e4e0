//! Run-queue wait from the scheduler's own accounting (`/proc/<pid>/task/<tid>/schedstat`,
//! second field: nanoseconds runnable but not running). Summed over a process's threads
//! before and after a call, it says how much of that call was spent waiting for a CPU
//! rather than working, which is what separates a program's tail from the machine's.

use std::time::Duration;

/// The run-queue wait of every thread of `pid` so far (threads that exited are not
/// counted, which a delta across one call does not notice).
pub fn run_queue_wait(pid: u32) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    let ns: u64 = tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| waited(&s))
        .sum();
    Duration::from_nanos(ns)
}

/// The calling thread's run-queue wait so far.
pub fn thread_run_queue_wait() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| waited(&s))
        .map(Duration::from_nanos)
        .unwrap_or_default()
}

/// The second field of a schedstat line.
fn waited(line: &str) -> Option<u64> {
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_wait_field() {
        assert_eq!(waited("123 456 7\n"), Some(456));
        assert_eq!(waited("123"), None);
        // This process and thread exist, so the files parse (the value may be 0).
        let _ = run_queue_wait(std::process::id());
        let _ = thread_run_queue_wait();
        assert!(std::path::Path::new("/proc/thread-self/schedstat").exists());
    }
}
