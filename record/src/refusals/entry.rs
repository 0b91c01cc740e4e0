//! One refusal as the journal stores it, and the checks every field passes on the way in
//! and out.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{CLAIMS_MAX, REASON_MAX, VERSION};
use crate::error::InvalidRecord;
use crate::validate::check_id;

/// A pod as the runtime names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's uid.
    pub uid: String,
}

/// One refused container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The entry format's version.
    pub version: u32,
    /// The pod of the refused container.
    pub pod: PodRef,
    /// The container's name in its pod.
    pub container: String,
    /// The runtime's container id.
    pub container_id: String,
    /// The pod's graft claims (`namespace/name`), when they could be read.
    #[serde(default)]
    pub claims: Vec<String>,
    /// Why it was refused, at most [`REASON_MAX`] bytes.
    pub reason: String,
    /// Milliseconds since the epoch.
    pub at_ms: u64,
}

impl Refusal {
    /// A refusal now, its reason and claims cut to the bounds.
    pub fn new(
        pod: PodRef,
        container: &str,
        container_id: &str,
        claims: &[String],
        reason: &str,
    ) -> Self {
        Refusal {
            version: VERSION,
            pod,
            container: container.to_string(),
            container_id: container_id.to_string(),
            claims: claims.iter().take(CLAIMS_MAX).cloned().collect(),
            reason: cut(reason, REASON_MAX),
            at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        }
    }

    /// Checks every field: what the driver posts comes from a file others could write.
    pub fn validate(&self) -> Result<(), InvalidRecord> {
        let bad = |field: &str, reason: String| InvalidRecord {
            field: field.to_string(),
            reason,
        };
        if self.version != VERSION {
            return Err(bad("version", format!("unknown version {}", self.version)));
        }
        check_name("pod.namespace", &self.pod.namespace, 63, false)?;
        check_name("pod.name", &self.pod.name, 253, true)?;
        check_id("pod.uid", &self.pod.uid)?;
        check_name("container", &self.container, 63, false)?;
        if self.container_id.is_empty()
            || self.container_id.len() > 128
            || !self.container_id.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            return Err(bad("container_id", "not a container id".into()));
        }
        if self.claims.len() > CLAIMS_MAX {
            return Err(bad("claims", format!("more than {CLAIMS_MAX}")));
        }
        for c in &self.claims {
            let (ns, name) = c
                .split_once('/')
                .ok_or_else(|| bad("claims", format!("{c:?} is not namespace/name")))?;
            check_name("claims", ns, 63, false)?;
            check_name("claims", name, 253, true)?;
        }
        if self.reason.len() > REASON_MAX || self.reason.chars().any(char::is_control) {
            return Err(bad(
                "reason",
                format!("longer than {REASON_MAX} bytes or has control characters"),
            ));
        }
        Ok(())
    }
}

/// A Kubernetes name: a DNS label (`dots`: a DNS subdomain) of at most `max` bytes.
fn check_name(field: &str, s: &str, max: usize, dots: bool) -> Result<(), InvalidRecord> {
    let ok = !s.is_empty()
        && s.len() <= max
        && s.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || (dots && b == b'.')
        })
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(InvalidRecord {
            field: field.to_string(),
            reason: format!("{:?} is not a Kubernetes name", cut(s, 80)),
        })
    }
}

/// `s` cut to at most `max` bytes at a character boundary, control characters replaced.
fn cut(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end]
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}
