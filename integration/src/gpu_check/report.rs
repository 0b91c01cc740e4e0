//! The check's verdicts and its markdown report.

use std::collections::BTreeSet;
use std::fmt::Write;
use std::time::Duration;

use graft_driver::model::Device;

use super::containers::{section, Section};
use super::discover::{attr, Scan};
use super::timing::Timing;

/// One PASS/FAIL line.
#[derive(Debug, Clone)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// Whether it passed.
    pub pass: bool,
    /// What was seen.
    pub detail: String,
}

/// A container's sections, or why it never ran.
pub type Run = Result<Vec<Section>, NotRun>;

/// Why a container's sections are missing.
#[derive(Debug, thiserror::Error)]
pub enum NotRun {
    /// Running it failed; the whole chain, as `{:#}` writes it.
    #[error("{0:#}")]
    Failed(anyhow::Error),
    /// It did not log its last marker in time.
    #[error("{pod}/{container} did not finish in {limit:?}:\n{described}")]
    Unfinished {
        /// The pod.
        pod: String,
        /// The container.
        container: String,
        /// How long it was given.
        limit: Duration,
        /// `kubectl describe` of the pod.
        described: String,
    },
}

/// What the GPU check found, rendered as markdown.
#[derive(Default)]
pub struct Report {
    /// (what, value) rows: GPU, driver, CUDA, kernel, containerd, runc, ...
    pub machine: Vec<(String, String)>,
    /// What discovery found, as text.
    pub discovery: String,
    /// The PASS/FAIL lines.
    pub checks: Vec<Check>,
    /// (heading, markdown body) per container.
    pub containers: Vec<(String, String)>,
    /// The start costs measured.
    pub timing: Vec<Timing>,
    /// Anything else worth a line.
    pub notes: Vec<String>,
}

impl Report {
    /// Adds a check.
    pub fn check(&mut self, name: &str, pass: bool, detail: impl Into<String>) {
        self.checks.push(Check {
            name: name.into(),
            pass,
            detail: detail.into(),
        });
    }

    /// Every check passed (and there was at least one).
    pub fn passed(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c.pass)
    }

    /// The report as markdown.
    pub fn markdown(&self) -> String {
        let mut s = String::from("# graft GPU check\n\n## Machine\n\n| | |\n|---|---|\n");
        for (k, v) in &self.machine {
            let _ = writeln!(s, "| {k} | {} |", v.replace('|', "\\|"));
        }
        s.push_str("\n## Checks\n\n");
        for c in &self.checks {
            let verdict = if c.pass { "PASS" } else { "FAIL" };
            let _ = writeln!(s, "- {verdict}: {} ({})", c.name, c.detail);
        }
        let passed = self.checks.iter().filter(|c| c.pass).count();
        let _ = writeln!(
            s,
            "\n**{}: {passed} of {} checks passed**\n",
            if self.passed() { "PASS" } else { "FAIL" },
            self.checks.len()
        );
        s.push_str(&self.discovery);
        for (heading, body) in &self.containers {
            let _ = write!(s, "\n## {heading}\n\n{body}");
        }
        s.push_str("\n## Container start: plain vs GPU (CRI CreateContainer + StartContainer)\n\n");
        if self.timing.is_empty() {
            s.push_str("not measured\n");
        }
        for t in &self.timing {
            s.push_str(&t.markdown());
            s.push('\n');
        }
        if !self.notes.is_empty() {
            s.push_str("\n## Notes\n\n");
            for n in &self.notes {
                let _ = writeln!(s, "- {n}");
            }
        }
        s
    }
}

/// The discovery section: what the scan found, and how long it took.
pub fn discovery(scan: &Scan, driver_root: &str) -> String {
    let mut s = format!(
        "## Discovery (driver root {driver_root}): {} devices in {:.1} ms\n\n",
        scan.devices.len(),
        scan.elapsed.as_secs_f64() * 1000.0
    );
    if let Some(e) = &scan.error {
        let _ = writeln!(s, "discovery failed: {e}\n");
        return s;
    }
    s.push_str("| device | type | productName | uuid | driverVersion | cudaDriverVersion |\n");
    s.push_str("|---|---|---|---|---|---|\n");
    for d in &scan.devices {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} |",
            d.name,
            attr(d, "type"),
            attr(d, "productName"),
            attr(d, "uuid"),
            attr(d, "driverVersion"),
            attr(d, "cudaDriverVersion")
        );
    }
    s
}

/// A container's outputs as markdown; `nvidia-smi -q` cut to its first 40 lines.
pub fn container_body(run: &Run) -> String {
    let sections = match run {
        Ok(s) => s,
        Err(e) => return format!("did not run: {e}\n"),
    };
    let mut s = String::new();
    for sec in sections {
        let mut lines: Vec<&str> = sec.output.lines().collect();
        let more = if sec.title == "nvidia-smi -q" && lines.len() > 40 {
            let n = lines.len() - 40;
            lines.truncate(40);
            format!("... ({n} more lines)\n")
        } else {
            String::new()
        };
        let _ = write!(
            s,
            "### `{}` (exit {})\n\n```text\n{}\n{more}```\n\n",
            sec.title,
            rc(sec),
            lines.join("\n")
        );
    }
    s
}

fn rc(s: &Section) -> String {
    s.rc.map_or("none".into(), |r| r.to_string())
}

/// `580.95.05` and the semver `580.95.5` compare equal.
fn same_version(a: &str, b: &str) -> bool {
    let norm = |v: &str| -> Vec<u64> { v.split('.').filter_map(|p| p.parse().ok()).collect() };
    !norm(a).is_empty() && norm(a) == norm(b)
}

/// The `gpu` container's checks, their names after `stage` (`""`, `"cluster: "`).
pub fn check_gpu(r: &mut Report, stage: &str, run: &Run, dev: &Device) {
    let mut check =
        |name: &str, pass: bool, detail: String| r.check(&format!("{stage}{name}"), pass, detail);
    let sections = match run {
        Ok(s) => s.clone(),
        Err(e) => {
            for name in [
                "nvidia-smi -L lists the GPU's UUID",
                "nvidia-smi -q shows the driver version",
                "the CUDA probe passes",
                "no /dev/nvidia* node graft did not inject",
            ] {
                check(name, false, format!("the gpu container did not run: {e}"));
            }
            return;
        }
    };
    let uuid = attr(dev, "uuid");
    let l = section(&sections, "nvidia-smi -L");
    check(
        "nvidia-smi -L lists the GPU's UUID",
        !uuid.is_empty() && l.rc == Some(0) && l.output.contains(&uuid),
        format!("{uuid}, exit {}", rc(&l)),
    );

    let q = section(&sections, "nvidia-smi -q");
    let shown = q
        .output
        .lines()
        .find(|l| l.trim_start().starts_with("Driver Version"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let found = attr(dev, "driverVersion");
    let version_ok = !shown.is_empty() && (found.is_empty() || same_version(&shown, &found));
    check(
        "nvidia-smi -q shows the driver version",
        q.rc == Some(0) && version_ok,
        format!("Driver Version {shown:?}, discovery {found:?}"),
    );

    let p = section(&sections, "probe");
    let verdict = p
        .output
        .lines()
        .find(|l| l.starts_with("PROBE "))
        .unwrap_or("no PROBE line")
        .to_string();
    check(
        "the CUDA probe passes",
        p.rc == Some(0) && verdict.starts_with("PROBE PASS"),
        verdict,
    );

    let injected: BTreeSet<&str> = dev
        .edits
        .device_nodes
        .iter()
        .map(|n| n.path.as_str())
        .collect();
    let nodes = section(&sections, "device nodes");
    let seen: Vec<&str> = nodes.output.lines().map(str::trim).collect();
    let extra: Vec<&str> = seen
        .iter()
        .copied()
        .filter(|p| !p.is_empty() && !injected.contains(p))
        .collect();
    check(
        "no /dev/nvidia* node graft did not inject",
        nodes.rc == Some(0) && extra.is_empty(),
        if extra.is_empty() {
            format!("{} nodes, all injected", seen.len())
        } else {
            format!("not injected: {}", extra.join(", "))
        },
    );
}

/// The `sibling` container's check: no device node, no working nvidia-smi or CUDA; its name
/// after `stage`.
pub fn check_sibling(r: &mut Report, stage: &str, run: &Run) {
    let name = &format!("{stage}the sibling container sees no GPU");
    let sections = match run {
        Ok(s) => s,
        Err(e) => {
            r.check(
                name,
                false,
                format!("the sibling container did not run: {e}"),
            );
            return;
        }
    };
    let nodes = section(sections, "device nodes");
    let smi = section(sections, "nvidia-smi -L");
    let probe = section(sections, "probe");
    let no_nodes = nodes.rc == Some(0) && nodes.output.trim().is_empty();
    let no_smi = smi.rc.is_some_and(|rc| rc != 0);
    let no_cuda = probe.rc.is_some_and(|rc| rc != 0);
    r.check(
        name,
        no_nodes && no_smi && no_cuda,
        format!(
            "device nodes: {}; nvidia-smi exit {}; probe exit {}",
            if no_nodes {
                "none"
            } else {
                nodes.output.trim()
            },
            rc(&smi),
            rc(&probe)
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_as_numbers() {
        assert!(same_version("580.95.05", "580.95.5"));
        assert!(!same_version("580.95.05", "580.82.7"));
        assert!(!same_version("", ""));
    }
}
