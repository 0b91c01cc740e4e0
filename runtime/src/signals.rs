//! SIGTERM and SIGINT begin a graceful shutdown: the kubelet's SIGTERM (a pod deleted, a
//! rollout) and an operator's Ctrl-C mean the same to every daemon. [`Signals`] is for a
//! daemon on tokio; [`stop_flag`] for one without an async runtime (graft-mps's poll loop).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::error::RuntimeError;

/// Which signal began the shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM.
    Terminate,
    /// SIGINT.
    Interrupt,
}

impl Stop {
    /// The signal's name.
    pub fn name(self) -> &'static str {
        match self {
            Stop::Terminate => "SIGTERM",
            Stop::Interrupt => "SIGINT",
        }
    }
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The shutdown signals, installed: from then on SIGTERM and SIGINT no longer end the
/// process at once, they resolve [`Signals::recv`].
pub struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    /// Installs the handlers (on the current tokio runtime). Early, so that a signal that
    /// comes during start-up is not lost.
    pub fn install() -> Result<Self, RuntimeError> {
        let handler = |kind, name| {
            signal(kind).map_err(|source| RuntimeError::Signal {
                signal: name,
                source,
            })
        };
        Ok(Signals {
            term: handler(SignalKind::terminate(), "SIGTERM")?,
            int: handler(SignalKind::interrupt(), "SIGINT")?,
        })
    }

    /// The next SIGTERM or SIGINT, logged ("terminating") as shutdown begins.
    pub async fn recv(&mut self) -> Stop {
        let stop = tokio::select! {
            _ = self.term.recv() => Stop::Terminate,
            _ = self.int.recv() => Stop::Interrupt,
        };
        tracing::info!(signal = stop.name(), "terminating");
        stop
    }
}

static STOP: AtomicBool = AtomicBool::new(false);
static INSTALLED: Mutex<bool> = Mutex::new(false);

/// A flag that SIGTERM and SIGINT set, for a daemon's loop without an async runtime; the
/// handlers are installed on the first call.
pub fn stop_flag() -> Result<&'static AtomicBool, RuntimeError> {
    let mut installed = INSTALLED.lock().unwrap_or_else(PoisonError::into_inner);
    if !*installed {
        for (sig, name) in [
            (nix::libc::SIGTERM, "SIGTERM"),
            (nix::libc::SIGINT, "SIGINT"),
        ] {
            // SAFETY: the action only stores to an atomic, which is async-signal-safe: it
            // takes no lock and allocates nothing.
            unsafe { signal_hook_registry::register(sig, || STOP.store(true, Ordering::SeqCst)) }
                .map_err(|source| RuntimeError::Signal {
                signal: name,
                source,
            })?;
        }
        *installed = true;
    }
    Ok(&STOP)
}

#[cfg(test)]
mod tests;
