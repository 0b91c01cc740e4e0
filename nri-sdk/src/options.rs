//! How the plugin reaches the runtime and what it tells it at registration.

use std::path::PathBuf;
use std::time::Duration;

use crate::guard::DEFAULT_DEADLINE;

/// How the plugin reaches the runtime.
#[derive(Debug, Clone)]
pub enum Transport {
    /// Dial the runtime's NRI socket; reconnect after it restarts.
    External(PathBuf),
    /// The runtime started us and passed the socket as this fd (`NRI_PLUGIN_SOCKET`);
    /// there is no reconnecting, the runtime relaunches pre-installed plugins itself.
    PreInstalled(i32),
}

/// What [`crate::run`] needs: who the plugin is, how to reach the runtime, its deadlines.
#[derive(Debug, Clone)]
pub struct Options {
    /// Plugin name (`[A-Za-z0-9_.+-]+`).
    pub name: String,
    /// Two-digit index; plugins run in ascending index order.
    pub index: String,
    /// How the runtime is reached.
    pub transport: Transport,
    /// Registration must finish within this (the runtime allows 5 s by default).
    pub registration_timeout: Duration,
    /// Every CreateContainer and lifecycle handler answers within this, else the request
    /// is refused (the runtime's own timeout would drop the plugin instead).
    pub handler_deadline: Duration,
    /// The first wait before reconnecting (external mode); doubled after each failure.
    pub backoff_initial: Duration,
    /// The longest wait before reconnecting.
    pub backoff_max: Duration,
    /// Answer CreateContainer on the multiplexer's reader task (`inline`), not through
    /// ttrpc's tasks. On by default; off only to compare the two paths.
    pub inline_create_container: bool,
    /// Answer Synchronize on the multiplexer's reader task before decoding it, when the
    /// plugin promises no updates ([`crate::NriPlugin::synchronize_updates`]): the runtime
    /// then waits for no decoding and no handler. On by default; off only to compare.
    pub inline_synchronize: bool,
}

/// Plugin options the runtime would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// The name has characters outside `[A-Za-z0-9_.+-]`, or is empty.
    #[error("plugin name {0:?} must match [A-Za-z0-9_.+-]+")]
    Name(String),
    /// The index is not two digits.
    #[error("plugin index {0:?} must be exactly two digits")]
    Index(String),
}

impl Options {
    /// Options with the default timeouts: registration 5 s, handlers
    /// [`DEFAULT_DEADLINE`], reconnects from 200 ms backing off to 5 s.
    pub fn new(name: impl Into<String>, index: impl Into<String>, transport: Transport) -> Self {
        Options {
            name: name.into(),
            index: index.into(),
            transport,
            registration_timeout: Duration::from_secs(5),
            handler_deadline: DEFAULT_DEADLINE,
            backoff_initial: Duration::from_millis(200),
            backoff_max: Duration::from_secs(5),
            inline_create_container: true,
            inline_synchronize: true,
        }
    }

    /// Checks name and index the way the runtime does, so a mistake is reported here.
    pub fn validate(&self) -> Result<(), OptionsError> {
        let name_ok = !self.name.is_empty()
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.+-".contains(&b));
        if !name_ok {
            return Err(OptionsError::Name(self.name.clone()));
        }
        if self.index.len() != 2 || !self.index.bytes().all(|b| b.is_ascii_digit()) {
            return Err(OptionsError::Index(self.index.clone()));
        }
        Ok(())
    }
}
