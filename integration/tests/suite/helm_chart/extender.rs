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
        // HTTPS by default, answering only kube-scheduler's client certificate.
        "value: /etc/graft-extender-tls/tls.crt",
        "name: GRAFT_EXTENDER_TLS_CLIENT_CA",
        "secretName: graft-scheduler-extender-tls",
    ] {
        ensure!(ds.contains(want), "{want:?} not in:\n{ds}");
    }
    let secret = on
        .split("\n---\n")
        .find(|d| {
            d.contains("\nkind: Secret\n") && d.contains("name: graft-scheduler-extender-tls\n")
        })
        .context("no Secret graft-scheduler-extender-tls")?;
    for key in [
        "ca.crt:",
        "tls.crt:",
        "tls.key:",
        "client.crt:",
        "client.key:",
    ] {
        ensure!(secret.contains(key), "{key} not in the extender's Secret");
    }
    ensure!(
        !secret.contains("ca.key"),
        "the CA's key is kept:\n{secret}"
    );
    let plain = tb.render_chart(&[
        "--set",
        "schedulerExtender.enabled=true",
        "--set",
        "schedulerExtender.tls.enabled=false",
    ])?;
    ensure!(
        !plain.contains("GRAFT_EXTENDER_TLS") && !plain.contains("graft-scheduler-extender-tls"),
        "TLS rendered with tls.enabled=false"
    );
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
    // Nodes only listed and watched (their metadata: the pool label of the fleet gauges).
    ensure!(
        role.contains("resources: [\"nodes\"]\n    verbs: [\"list\", \"watch\"]"),
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
