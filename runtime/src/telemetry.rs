//! The telemetry server of a daemon, with its readiness checks: one registry holding the
//! daemon's metrics beside the `process_*` figures and its build information, and one
//! readiness made of the daemon's checks, served by graft-telemetry on a TCP address and on
//! the probe socket.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use graft_telemetry::{Endpoints, NotReady, ReadyCheck};
use prometheus_client::registry::Registry;

/// What a daemon serves for operations, being put together.
pub struct Telemetry {
    registry: Registry,
    checks: Vec<ReadyCheck>,
}

impl Telemetry {
    /// A registry with the process's figures and `<build_info>{version} 1`, and no
    /// readiness check yet (ready: "ok").
    pub fn new(build_info: &str) -> Self {
        let mut registry = Registry::default();
        graft_telemetry::register_process(&mut registry);
        graft_telemetry::register_build_info(&mut registry, build_info);
        Telemetry {
            registry,
            checks: Vec::new(),
        }
    }

    /// Where the daemon registers its own metrics.
    pub fn registry(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Adds a readiness check: ready only while every check is.
    pub fn ready_when(mut self, check: ReadyCheck) -> Self {
        self.checks.push(check);
        self
    }

    /// The endpoints: `/readyz` asks the checks in the order they were added and answers
    /// with the first one's reason not to be ready, else with their reasons to be, joined.
    pub fn endpoints(self) -> Endpoints {
        Endpoints::new(self.registry, all(self.checks))
    }

    /// Serves the endpoints on `tcp` (bound in the background, retried while another
    /// instance holds it) and on the probe `socket` (none, or an empty path: not at all). A
    /// socket that cannot be bound is logged, not fatal: the daemon's real work goes on,
    /// and its probes say what is wrong.
    pub fn serve(self, tcp: Option<SocketAddr>, socket: Option<&Path>) {
        graft_telemetry::serve_or_log(self.endpoints(), tcp, socket.unwrap_or(Path::new("")));
    }
}

/// One check made of `checks`, asked in order: the first `Err`, else the `Ok`s' reasons
/// joined by "; " ("ok" when none says anything).
pub fn all(checks: Vec<ReadyCheck>) -> ReadyCheck {
    Arc::new(move || -> Result<String, NotReady> {
        let mut why = Vec::new();
        for check in &checks {
            let said = check()?;
            if !said.is_empty() {
                why.push(said);
            }
        }
        Ok(match why.is_empty() {
            true => "ok".to_string(),
            false => why.join("; "),
        })
    })
}

#[cfg(test)]
mod tests;
