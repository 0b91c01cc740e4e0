//! The chart inside other charts and platforms: as a dependency of an umbrella chart (whose
//! `global` values Helm hands to every subchart), and the rollout and priority values that
//! platforms differ on.

use std::process::Command;

use anyhow::{ensure, Context};
use graft_integration::Testbed;

use super::chart;

/// Copies the directory `from` into `to`, recursively (the chart is a few small files).
fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &dest)?;
        } else {
            std::fs::copy(e.path(), &dest)?;
        }
    }
    Ok(())
}

/// An umbrella chart with graft as a dependency renders with `global` values set, in the
/// umbrella's values and on the command line (Helm validates the subchart's values, with
/// `global` in them, against graft's schema).
#[test]
fn the_chart_installs_as_a_subchart_with_global_values() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let dir = tempfile::tempdir()?;
    let umbrella = dir.path().join("platform");
    copy_dir(&chart(), &umbrella.join("charts/graft"))?;
    std::fs::write(
        umbrella.join("Chart.yaml"),
        "apiVersion: v2\nname: platform\nversion: 1.0.0\ndependencies:\n  - name: graft\n    \
         version: 0.1.0\n",
    )?;
    std::fs::write(
        umbrella.join("values.yaml"),
        "global:\n  imageRegistry: registry.example\n  storageClass: fast\ngraft:\n  \
         requireGraftNri:\n    enabled: true\n",
    )?;
    let out = Command::new(&tb.helm)
        .args(["template", "platform"])
        .arg(&umbrella)
        .args(["--namespace", "graft-system", "--set", "global.team=gpu"])
        .output()
        .context("running helm")?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    ensure!(
        out.status.success(),
        "helm template of the umbrella: {stderr}"
    );
    ensure!(
        stdout.contains("kind: DaemonSet") && stdout.contains("name: graft-nri-validator"),
        "graft's DaemonSet missing from the umbrella's rendering:\n{stdout}"
    );
    // The umbrella's values for graft reach it.
    ensure!(stdout.contains("kind: MutatingAdmissionPolicy"), "{stdout}");
    Ok(())
}

/// The node DaemonSets' rollout and the pods' priority class are values: the defaults keep
/// a node served during an update, and a platform that limits system-node-critical gets
/// another class or none.
#[test]
fn update_strategy_and_priority_class_are_values() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let ds = ["--show-only", "templates/50-daemonset.yaml"];
    let default = tb.render_chart(&ds)?;
    ensure!(
        default.contains("      maxSurge: 1\n      maxUnavailable: 0\n")
            && default.contains("priorityClassName: system-node-critical"),
        "{default}"
    );
    let mut args = ds.to_vec();
    args.extend([
        "--set",
        "updateStrategy.maxSurge=0",
        "--set",
        "updateStrategy.maxUnavailable=10%",
        "--set",
        "priorityClassName=gpu-agents",
    ]);
    let set = tb.render_chart(&args)?;
    ensure!(
        set.contains("      maxSurge: 0\n      maxUnavailable: 10%\n")
            && set.contains("priorityClassName: gpu-agents"),
        "{set}"
    );
    let none = tb.render_chart(&[
        "--show-only",
        "templates/50-daemonset.yaml",
        "--set",
        "priorityClassName=",
    ])?;
    ensure!(!none.contains("priorityClassName"), "{none}");
    // A key the strategy does not have is refused by the schema, with its name.
    let e = tb
        .render_chart(&["--set", "updateStrategy.maxSurges=1"])
        .err()
        .context("an unknown updateStrategy key rendered")?;
    ensure!(format!("{e:#}").contains("maxSurges"), "{e:#}");
    Ok(())
}
