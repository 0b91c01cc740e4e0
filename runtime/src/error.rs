//! What can go wrong running a daemon: setting the process up, and its tasks.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Setting a daemon's process up, or a task of it that ended while it should have run on.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The tokio runtime could not be built.
    #[error("starting the async runtime")]
    Runtime(#[source] std::io::Error),
    /// A signal's handler could not be installed.
    #[error("{signal} handler")]
    Signal {
        /// The signal: SIGTERM or SIGINT.
        signal: &'static str,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// `--log-file` could not be opened.
    #[error("opening log file {}", path.display())]
    LogFile {
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A task of the daemon ended while it should have run on.
    #[error(transparent)]
    Task(#[from] TaskFailed),
}

/// A task that ended before shutdown, and how: what ends a daemon that cannot go on
/// without it.
#[derive(Debug, thiserror::Error)]
#[error("task {task} {how}")]
pub struct TaskFailed {
    /// The task's name.
    pub task: &'static str,
    /// How it ended.
    pub how: How,
}

/// How a task ended.
#[derive(Debug)]
pub enum How {
    /// It returned (`Ok`, or nothing) while it should have run until shutdown.
    Returned,
    /// It returned this error.
    Failed(Box<dyn std::error::Error + Send + Sync>),
    /// It panicked, with this message.
    Panicked(String),
}

impl fmt::Display for How {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            How::Returned => write!(f, "returned"),
            How::Panicked(why) => write!(f, "panicked: {why}"),
            // The whole chain on one line: the error alone often says too little.
            How::Failed(e) => {
                write!(f, "failed: {e}")?;
                let mut source = e.source();
                while let Some(s) = source {
                    write!(f, ": {s}")?;
                    source = s.source();
                }
                Ok(())
            }
        }
    }
}

/// Tasks that ended before shutdown: each one's name and how it ended (readiness's reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a task stopped: {0}")]
pub struct TasksStopped(pub String);

/// Tasks that had not stopped when shutdown's deadline passed: they were aborted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tasks still running {wait:?} after shutdown began, aborted: {}", tasks.join(", "))]
pub struct ShutdownOverdue {
    /// The tasks still running, by name, sorted.
    pub tasks: Vec<&'static str>,
    /// How long they were given.
    pub wait: Duration,
}
