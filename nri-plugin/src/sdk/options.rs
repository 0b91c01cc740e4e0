//! How the plugin reaches the runtime and what it tells it at registration.

use std::path::PathBuf;
use std::time::Duration;

use crate::guard::DEFAULT_DEADLINE;

/// How graft-nri reaches the runtime.
#[derive(Debug, Clone)]
pub enum Transport {
    /// Dial the runtime's NRI socket; reconnect after it restarts.
    External(PathBuf),
    /// The runtime started us and passed the socket as this fd (`NRI_PLUGIN_SOCKET`);
    /// there is no reconnecting, the runtime relaunches pre-installed plugins itself.
    PreInstalled(i32),
}

#[derive(Debug, Clone)]
pub struct Options {
    /// Plugin name (`[A-Za-z0-9_.+-]+`).
    pub name: String,
    /// Two-digit index; plugins run in ascending index order.
    pub index: String,
    pub transport: Transport,
    /// Registration must finish within this (the runtime allows 5 s by default).
    pub registration_timeout: Duration,
    /// Every CreateContainer and lifecycle handler answers within this, else the request
    /// is refused (the runtime's own timeout would drop the plugin instead).
    pub handler_deadline: Duration,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

impl Options {
    pub fn new(name: impl Into<String>, index: impl Into<String>, transport: Transport) -> Self {
        Options {
            name: name.into(),
            index: index.into(),
            transport,
            registration_timeout: Duration::from_secs(5),
            handler_deadline: DEFAULT_DEADLINE,
            backoff_initial: Duration::from_millis(200),
            backoff_max: Duration::from_secs(5),
        }
    }

    /// Checks name and index the way the runtime does, so a mistake is reported here.
    pub fn validate(&self) -> Result<(), String> {
        let name_ok = !self.name.is_empty()
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.+-".contains(&b));
        if !name_ok {
            return Err(format!(
                "plugin name {:?} must match [A-Za-z0-9_.+-]+",
                self.name
            ));
        }
        if self.index.len() != 2 || !self.index.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "plugin index {:?} must be exactly two digits",
                self.index
            ));
        }
        Ok(())
    }
}
