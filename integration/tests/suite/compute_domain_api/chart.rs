//! The chart's controller: installed only when asked, with RBAC for exactly its calls.

use anyhow::ensure;

use graft_integration::apiserver::ControlPlane;

use super::harness::{self, client};

/// Applies chart objects rendered by `helm template` (graft's namespace made first).
pub(crate) fn apply_rendered(cp: &ControlPlane, rendered: &str) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, rendered)?;
    let _ = cp.kubectl(&["create", "namespace", "graft-system"]);
    cp.kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        &file.to_string_lossy(),
    ])?;
    Ok(())
}

/// Whether graft's ServiceAccount `sa` may make the call `args` (`kubectl auth can-i`).
pub(crate) fn can_i(cp: &ControlPlane, sa: &str, args: &[&str]) -> bool {
    let as_sa = format!("--as=system:serviceaccount:graft-system:{sa}");
    let mut a = vec!["auth", "can-i", as_sa.as_str()];
    a.extend_from_slice(args);
    cp.kubectl(&a).is_ok_and(|o| o.trim() == "yes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_installs_the_controller_with_only_what_it_needs() -> anyhow::Result<()> {
    let _c = client().await?;
    let cp = harness::cp()?;
    let tb = graft_integration::Testbed::load()?;
    let rendered = tb.render_chart(&[
        "--set",
        "computeDomains.enabled=true",
        "--show-only",
        "templates/70-compute-domain-crd.yaml",
        "--show-only",
        "templates/70-compute-domain-controller.yaml",
    ])?;
    ensure!(
        // No object of the feature (comments may name it).
        !tb.render_chart(&[])?
            .lines()
            .any(|l| !l.trim_start().starts_with('#') && l.contains("ComputeDomain")),
        "on by default"
    );
    apply_rendered(cp, &rendered)?;
    let can = |args: &[&str]| can_i(cp, "graft-compute-domain-controller", args);
    // Every call the controller makes...
    for call in [
        &["watch", "computedomains.resource.graft.dev", "-A"][..],
        &[
            "patch",
            "computedomains.resource.graft.dev",
            "--subresource=status",
            "-n",
            "x",
        ],
        &[
            "update",
            "computedomains.resource.graft.dev",
            "--subresource=finalizers",
            "-n",
            "x",
        ],
        &["list", "resourceslices.resource.k8s.io"],
        &["watch", "resourceslices.resource.k8s.io"],
        &["watch", "nodes"],
        &["list", "configmaps", "-n", "graft-system"],
        &["patch", "configmaps", "-n", "graft-system"],
        &["delete", "configmaps", "-n", "graft-system"],
        &["list", "resourceclaims.resource.k8s.io", "-A"],
        &["watch", "resourceclaims.resource.k8s.io", "-A"],
        &[
            "patch",
            "resourceclaims.resource.k8s.io",
            "--subresource=status",
            "-n",
            "x",
        ],
        &[
            "arbitrary-node:patch",
            "resourceclaims.resource.k8s.io/graft.dev",
            "--subresource=driver",
            "-n",
            "x",
        ],
        &["list", "computedomains.resource.graft.dev", "-A"],
        &[
            "create",
            "resourceclaimtemplates.resource.k8s.io",
            "-n",
            "x",
        ],
        &["patch", "nodes"],
        &["create", "events.events.k8s.io", "-n", "x"],
        &["create", "daemonsets.apps", "-n", "graft-system"],
        &["watch", "pods", "-n", "graft-system"],
        &["update", "leases.coordination.k8s.io", "-n", "graft-system"],
    ] {
        ensure!(can(call), "the chart's RBAC does not allow {call:?}");
    }
    // ...and not more.
    for call in [
        &["create", "daemonsets.apps", "-n", "x"][..],
        &["list", "pods", "-A"],
        &["get", "secrets", "-n", "graft-system"],
        &["delete", "nodes"],
        &["update", "leases.coordination.k8s.io", "-n", "kube-system"],
        &["create", "resourceslices.resource.k8s.io"],
        &["patch", "configmaps", "-n", "x"],
        &["update", "resourceclaims.resource.k8s.io", "-n", "x"],
        &[
            "arbitrary-node:patch",
            "resourceclaims.resource.k8s.io/gpu.nvidia.com",
            "--subresource=driver",
            "-n",
            "x",
        ],
    ] {
        ensure!(!can(call), "the chart's RBAC allows {call:?}");
    }
    Ok(())
}
