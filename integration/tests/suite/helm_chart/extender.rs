//! graft-scheduler-extender in the chart: absent by default; when on, a DaemonSet on the
//! control plane with the host's network answering on the loopback, probed on its metrics
//! port, with RBAC that reads slices and claims and writes only Events; a bad mode refused
//! by the schema.

use anyhow::{ensure, Context};
use graft_integration::Testbed;

#[test]
fn scheduler_extender_is_off_by_default_and_writes_only_events() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let plain = tb.render_chart(&[])?;
    ensure!(
        !plain.contains("graft-scheduler-extender"),
        "the extender is rendered without being asked for"
    );

    let on = tb.render_chart(&["--set", "schedulerExtender.enabled=true"])?;
    let doc = |kind: &str| {
        on.split("\n---\n")
            .find(|d| {
                d.contains(&format!("\nkind: {kind}\n"))
                    && d.contains("\n  name: graft-scheduler-extender\n")
            })
            .with_context(|| format!("no {kind} graft-scheduler-extender"))
    };
    let ds = doc("DaemonSet")?;
    for want in [
        "hostNetwork: true",
        "node-role.kubernetes.io/control-plane: \"\"",
        "command: [\"/usr/bin/graft-scheduler-extender\"]",
        "- --gpu-class=gpu.graft.dev",
        "value: \"127.0.0.1:8897\"",
        "value: \"pack\"",
        "httpGet: {path: /readyz, port: 9480}",
        "runAsNonRoot: true",
        "readOnlyRootFilesystem: true",
    ] {
        ensure!(ds.contains(want), "{want:?} not in:\n{ds}");
    }
    let role = doc("ClusterRole")?;
    // It writes only Events; slices and claims it reads.
    let writes: Vec<&str> = role
        .split("  - apiGroups: ")
        .filter(|rule| {
            ["create", "update", "patch", "delete"]
                .iter()
                .any(|v| rule.contains(&format!("\"{v}\"")))
        })
        .collect();
    ensure!(
        writes.len() == 1 && writes[0].starts_with("[\"events.k8s.io\"]"),
        "the extender may write more than Events:\n{role}"
    );
    ensure!(
        role.contains("resources: [\"resourceclaims\"]\n    verbs: [\"get\", \"list\", \"watch\"]"),
        "{role}"
    );

    let dir = tempfile::tempdir()?;
    let bad = dir.path().join("v.yaml");
    std::fs::write(&bad, "schedulerExtender: {enabled: true, mode: binpack}\n")?;
    let err = tb
        .render_chart(&["-f", bad.to_str().context("path")?])
        .err()
        .context("mode binpack was accepted")?;
    ensure!(format!("{err:#}").contains("mode"), "{err:#}");
    Ok(())
}
