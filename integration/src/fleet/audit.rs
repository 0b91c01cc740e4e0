//! Who asks the API server what: kube-apiserver's audit log at the Metadata level (no
//! bodies), counted by the caller's User-Agent between two moments. graft's components
//! name themselves (`graft-scheduler-extender/<version>`, graft-api's `client`); the
//! simulator's own client sends none.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use anyhow::Context;
use k8s_openapi::jiff::Timestamp;

/// The name the simulator's own requests are counted under.
pub const SIMULATOR: &str = "(simulator)";

/// kube-apiserver arguments that write the audit log to `log`, with the policy written
/// to `policy`: one event per request (a watch counted when it starts).
pub fn args(policy: &Path, log: &Path) -> anyhow::Result<Vec<String>> {
    std::fs::write(
        policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n  - level: Metadata\n",
    )
    .with_context(|| format!("writing {}", policy.display()))?;
    Ok(vec![
        format!("--audit-policy-file={}", policy.display()),
        format!("--audit-log-path={}", log.display()),
        "--audit-log-format=json".into(),
        "--audit-log-mode=batch".into(),
    ])
}

/// Requests and watches started, by caller.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Caller (the User-Agent's product) to (requests other than watches, watches).
    pub by: BTreeMap<String, (u64, u64)>,
}

impl Counts {
    /// Requests other than watches by `caller`.
    pub fn requests(&self, caller: &str) -> u64 {
        self.by.get(caller).map_or(0, |c| c.0)
    }

    /// Watches started by `caller`.
    pub fn watches(&self, caller: &str) -> u64 {
        self.by.get(caller).map_or(0, |c| c.1)
    }
}

fn caller(agent: &str) -> String {
    match agent.split('/').next().unwrap_or("").trim() {
        "" => SIMULATOR.to_string(),
        a => a.to_string(),
    }
}

/// The audit log's events from `from` to `to`, counted.
pub fn count(log: &PathBuf, from: Timestamp, to: Timestamp) -> anyhow::Result<Counts> {
    let file = std::fs::File::open(log).with_context(|| format!("opening {}", log.display()))?;
    let mut counts = Counts::default();
    for line in std::io::BufReader::new(file).lines() {
        let line = line?;
        let Ok(ev) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let Some(at) = ev["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<Timestamp>().ok())
        else {
            continue;
        };
        if at < from || at > to {
            continue;
        }
        let verb = ev["verb"].as_str().unwrap_or("");
        let stage = ev["stage"].as_str().unwrap_or("");
        let entry = counts
            .by
            .entry(caller(ev["userAgent"].as_str().unwrap_or("")))
            .or_default();
        match (verb, stage) {
            ("watch", "ResponseStarted") => entry.1 += 1,
            ("watch", _) => {}
            (_, "ResponseComplete") => entry.0 += 1,
            _ => {}
        }
    }
    Ok(counts)
}
