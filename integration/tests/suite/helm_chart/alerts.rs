//! The chart's alerts under Prometheus' own tooling: `promtool check rules` on the rendered
//! PrometheusRule's groups, and `promtool test rules` with prometheus_rules_test.yaml
//! (beside this file), which feeds series to the rules and says which alerts fire: graft's
//! metrics absent, a graft target down, a daemon's memory near its limit.
//!
//! Needs the testbed's promtool (GRAFT_PROMTOOL, built by `integration/testbed/setup.sh`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context};
use graft_integration::Testbed;
use serde_json::Value;

use super::pools::{find, render};

/// The unit tests of the rules, as the chart renders them by default (release graft in
/// graft-system); they read the rules from graft-rules.yaml beside them.
const RULE_TESTS: &str = include_str!("prometheus_rules_test.yaml");

/// The testbed's promtool: GRAFT_PROMTOOL in its env file.
fn promtool() -> anyhow::Result<PathBuf> {
    let env = Testbed::cache_dir().join("env");
    let text = std::fs::read_to_string(&env)
        .with_context(|| format!("{}: run integration/testbed/setup.sh", env.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("GRAFT_PROMTOOL="))
        .map(PathBuf::from)
        .with_context(|| {
            format!(
                "{} lacks GRAFT_PROMTOOL: rerun integration/testbed/setup.sh",
                env.display()
            )
        })
}

/// The chart's PrometheusRule rendered with `args`.
fn prometheus_rule(tb: &Testbed, args: &[&str]) -> anyhow::Result<Value> {
    let mut all = vec!["--set", "metrics.prometheusRule.enabled=true"];
    all.extend(args);
    let objs = render(tb, &all)?;
    find(&objs, "PrometheusRule", "graft")
        .cloned()
        .context("no PrometheusRule")
}

/// Writes the rule's spec (a Prometheus rules file: `groups`) as `dir`/graft-rules.yaml.
fn write_rules(rule: &Value, dir: &Path) -> anyhow::Result<()> {
    let spec = serde_norway::to_string(&rule["spec"])?;
    std::fs::write(dir.join("graft-rules.yaml"), spec)?;
    Ok(())
}

/// Runs promtool in `dir`; its output, or an error with it.
fn run(promtool: &Path, dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .with_context(|| format!("running {}", promtool.display()))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("promtool {args:?}: {text}");
    }
    Ok(text)
}

/// The expressions of the rules named `alert`.
fn exprs(rule: &Value, alert: &str) -> Vec<String> {
    rule["spec"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["rules"].as_array())
        .flatten()
        .filter(|r| r["alert"] == alert)
        .filter_map(|r| r["expr"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn prometheus_rules_pass_promtool() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let promtool = promtool()?;
    let dir = tempfile::tempdir()?;
    let rule = prometheus_rule(&tb, &[])?;
    write_rules(&rule, dir.path())?;
    // Lints (duplicate rules) fail it too.
    let out = run(
        &promtool,
        dir.path(),
        &["check", "rules", "--lint-fatal", "graft-rules.yaml"],
    )?;
    ensure!(out.contains("SUCCESS"), "{out}");
    std::fs::write(dir.path().join("graft-rules-test.yaml"), RULE_TESTS)?;
    let out = run(
        &promtool,
        dir.path(),
        &["test", "rules", "graft-rules-test.yaml"],
    )?;
    ensure!(out.contains("SUCCESS"), "{out}");

    // What else the rules may render as also passes the check: no graft-nri metrics, no
    // graft-nri limit, a limit in other units, the GPU values.
    let gpu = super::chart().join("values-gpu.yaml");
    let gpu = gpu.to_string_lossy();
    for args in [
        &["--set", "metrics.nriAddr=off"][..],
        &["--set", "resources.nri.limits=null"][..],
        &["--set", "resources.driver.limits.memory=1.5Gi"][..],
        &["-f", &gpu][..],
    ] {
        let rule = prometheus_rule(&tb, args)?;
        write_rules(&rule, dir.path())?;
        run(
            &promtool,
            dir.path(),
            &["check", "rules", "--lint-fatal", "graft-rules.yaml"],
        )
        .with_context(|| format!("{args:?}"))?;
    }
    Ok(())
}

#[test]
fn memory_alert_follows_the_limits() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let memory = |args: &[&str]| -> anyhow::Result<Vec<String>> {
        Ok(exprs(&prometheus_rule(&tb, args)?, "GraftMemoryNearLimit"))
    };
    let driver = |bytes: &str| {
        format!(
            "(process_resident_memory_bytes and on (instance, job) graft_driver_build_info) \
             > 0.9 * {bytes}"
        )
    };
    let nri = |bytes: &str| {
        format!(
            "(process_resident_memory_bytes and on (instance, job) graft_nri_build_info) \
             > 0.9 * {bytes}"
        )
    };
    // Defaults: 64Mi and 32Mi.
    let got = memory(&[])?;
    ensure!(got == [driver("67108864"), nri("33554432")], "{got:#?}");
    // Other units, a plain number of bytes; no limit, no alert.
    let got = memory(&[
        "--set",
        "resources.driver.limits.memory=1.5Gi",
        "--set",
        "resources.nri.limits=null",
    ])?;
    ensure!(got == [driver("1610612736")], "{got:#?}");
    let got = memory(&[
        "--set",
        "resources.driver.limits.memory=500M",
        "--set",
        "resources.nri.limits.memory=50000000",
    ])?;
    ensure!(got == [driver("500000000"), nri("50000000")], "{got:#?}");
    // No graft-nri metrics: neither its memory nor its absent alert.
    let rule = prometheus_rule(&tb, &["--set", "metrics.nriAddr=off"])?;
    ensure!(exprs(&rule, "GraftMemoryNearLimit") == [driver("67108864")]);
    ensure!(exprs(&rule, "GraftMetricsAbsent") == ["absent(graft_driver_build_info)"]);
    // A limit the template cannot read fails the render rather than misplace the threshold.
    let err = prometheus_rule(&tb, &["--set", "resources.driver.limits.memory=64MB"])
        .err()
        .context("64MB rendered")?;
    ensure!(
        format!("{err:#}").contains("resources.driver.limits.memory"),
        "{err:#}"
    );
    Ok(())
}
