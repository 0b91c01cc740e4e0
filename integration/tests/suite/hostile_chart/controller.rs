//! graft-compute-domain-controller's ServiceAccount on the suite's API server, with the
//! chart's controller RBAC and policies (ComputeDomains on, GPU mode) applied as rendered:
//! the attacks of `cluster_tokens::controller`, without a cluster.

use anyhow::Context;
use graft_integration::Testbed;

use super::install;
use crate::cluster_tokens::controller::{is_held, Target};

const NODE: &str = "controller-node";
const DRIVER_ROOT: &str = "/run/nvidia/driver";

#[test]
fn the_controller_runs_only_imex_daemons() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let cp = super::control_plane()?;
    let gpu = super::chart().join("values-gpu.yaml");
    let root = format!("nvidia.driverRoot={DRIVER_ROOT}");
    let yaml = tb.render_chart(&[
        "-f",
        gpu.to_str().context("path")?,
        "--set",
        "computeDomains.enabled=true",
        "--set",
        &root,
        "--show-only",
        "templates/70-compute-domain-crd.yaml",
        "--show-only",
        "templates/70-compute-domain-controller.yaml",
        "--show-only",
        "templates/21-compute-domain-admission-policy.yaml",
        "--show-only",
        "templates/51-gpu-daemonset.yaml",
    ])?;
    // The IMEX image as the chart gives it to the controller.
    let image = yaml
        .split("name: GRAFT_IMEX_IMAGE\n")
        .nth(1)
        .and_then(|r| r.lines().next())
        .and_then(|l| l.trim().strip_prefix("value: "))
        .map(|v| v.trim_matches('"').to_string())
        .context("no GRAFT_IMEX_IMAGE")?;
    install(cp, "controller.yaml", &yaml)?;
    let node = format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {NODE}\n  labels:\n\
         \x20   nvidia.com/gpu.present: \"true\"\n"
    );
    // Created, not applied: kubectl's server-side apply below would otherwise rewrite the
    // last-applied annotation a client-side apply leaves, which the policy refuses.
    let _ = super::kubectl_file(cp, "controller-node.yaml", &node, &["create"]);
    let n = is_held(&Target {
        kubectl: &|args| cp.kubectl(args),
        image: &image,
        driver_root: DRIVER_ROOT,
        node: NODE,
        graft_daemonset: "graft-gpu",
    })?;
    eprintln!("{n} attacks with the controller's ServiceAccount, 0 accepted");
    Ok(())
}
