//! graft-compute-domain-controller's ServiceAccount on the suite's API server, with the
//! chart's controller RBAC and policies (ComputeDomains on, GPU mode) applied as rendered:
//! the attacks of `cluster_tokens::controller`, without a cluster.

use anyhow::{ensure, Context};
use graft_integration::apiserver::ControlPlane;
use graft_integration::Testbed;

use super::install;
use crate::cluster_tokens::controller::{is_held, Target};

const NODE: &str = "controller-node";
const DRIVER_ROOT: &str = "/run/nvidia/driver";

/// The chart's controller RBAC and policies, rendered as shipped and applied; the IMEX
/// image the chart gives the controller.
fn install_controller(tb: &Testbed, cp: &ControlPlane) -> anyhow::Result<String> {
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
    Ok(image)
}

#[test]
fn the_controller_runs_only_imex_daemons() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let cp = super::control_plane()?;
    let image = install_controller(&tb, cp)?;
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

const CONTROLLER: &str = "system:serviceaccount:graft-system:graft-compute-domain-controller";

/// A client that is the controller's ServiceAccount (it patches without reading first).
async fn controller_client(cp: &ControlPlane) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(&cp.kubeconfig)?;
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    cfg.auth_info.impersonate = Some(CONTROLLER.into());
    Ok(kube::Client::try_from(cfg)?)
}

/// The controller's ServiceAccount may set the conditions of graft's devices in a claim's
/// status (a domain's binding), and nothing else of it: not the allocation, the
/// reservations, another driver's device status; and may delete a domain's workload claim
/// that is not allocated (the domain moves), but no other claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_writes_only_graft_device_status_of_claims() -> anyhow::Result<()> {
    use k8s_openapi::api::resource::v1::ResourceClaim;
    use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
    use serde_json::{json, Value};

    let tb = Testbed::load()?;
    let cp = super::control_plane()?;
    install_controller(&tb, cp)?;
    let _ = cp.kubectl(&["create", "namespace", "cd-claims"]);
    let admin = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&cp.kubeconfig)?,
            &Default::default(),
        )
        .await?,
    )?;
    let as_admin: Api<ResourceClaim> = Api::namespaced(admin, "cd-claims");
    let as_controller: Api<ResourceClaim> =
        Api::namespaced(controller_client(cp).await?, "cd-claims");
    let claim: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": "w"},
        "spec": {"devices": {"requests": [
            {"name": "a", "exactly": {"deviceClassName": "imex-channel.graft.dev"}},
            {"name": "b", "exactly": {"deviceClassName": "nic.example.com"}}]}},
    }))?;
    let _ = as_admin.create(&PostParams::default(), &claim).await;
    let allocation = |device: &str| {
        json!({"status": {"allocation": {"devices": {"results": [
            {"request": "a", "driver": "graft.dev", "pool": "n1", "device": device},
            {"request": "b", "driver": "nic.example.com", "pool": "n1", "device": "nic-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}})
    };
    let merge = |p: Value| Patch::Merge(p);
    let pp = PatchParams::default();
    as_admin
        .patch_status("w", &pp, &merge(allocation("imex-channel-0")))
        .await?;
    let condition = |driver: &str, device: &str| {
        json!({"driver": driver, "pool": "n1", "device": device, "conditions": [
            {"type": "resource.graft.dev/ComputeDomainReady", "status": "True",
             "reason": "DaemonReady", "message": "", "lastTransitionTime": "2026-12-03T10:00:00Z"}]})
    };
    let ours = condition("graft.dev", "imex-channel-0");
    let attacks = [
        (
            "another driver's device status",
            json!({"status": {"devices": [ours.clone(), condition("nic.example.com", "nic-0")]}}),
        ),
        ("the allocation", allocation("imex-channel-1")),
        (
            "the reservations",
            json!({"status": {"reservedFor": [{"resource": "pods", "name": "x", "uid": "u"}]}}),
        ),
    ];
    // Policies reach admission a moment after they are made: each attack is retried (and
    // undone) until refused, for up to 60 s.
    let start = std::time::Instant::now();
    for (what, patch) in &attacks {
        while as_controller
            .patch_status("w", &pp, &merge(patch.clone()))
            .await
            .is_ok()
        {
            ensure!(
                start.elapsed().as_secs() < 60,
                "the controller changed {what} of a claim"
            );
            as_admin
                .patch_status(
                    "w",
                    &pp,
                    &merge(json!({"status": {"devices": null, "reservedFor": null}})),
                )
                .await?;
            as_admin
                .patch_status("w", &pp, &merge(allocation("imex-channel-0")))
                .await?;
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    }
    // Deleting: only a domain's workload claim (labelled) that is not allocated, when its
    // domain moves (compute-domain/src/revisit.rs); never one allocated or not a domain's.
    let labelled = |name: &str| -> anyhow::Result<ResourceClaim> {
        Ok(serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"resource.graft.dev/computeDomain": "u"}},
            "spec": {"devices": {"requests": [
                {"name": "a", "exactly": {"deviceClassName": "imex-channel.graft.dev"}},
                {"name": "b", "exactly": {"deviceClassName": "nic.example.com"}}]}},
        }))?)
    };
    for name in ["moving", "placed", "plain"] {
        let _ = as_admin.delete(name, &DeleteParams::default()).await;
    }
    as_admin
        .create(&PostParams::default(), &labelled("moving")?)
        .await?;
    as_admin
        .create(&PostParams::default(), &labelled("placed")?)
        .await?;
    as_admin
        .patch_status("placed", &pp, &merge(allocation("imex-channel-0")))
        .await?;
    let mut unlabelled = labelled("plain")?;
    unlabelled.metadata.labels = None;
    as_admin.create(&PostParams::default(), &unlabelled).await?;
    // The API server's own checks may have refused the attacks above before the policy
    // took effect (a loaded machine takes seconds): wait until it refuses a dry-run delete.
    let dry = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    let start = std::time::Instant::now();
    loop {
        match as_controller.delete("w", &dry).await {
            Err(e) if e.to_string().contains("compute-domain-claims") => break,
            r => {
                ensure!(
                    start.elapsed().as_secs() < 60,
                    "the claims policy did not refuse the controller's delete within 60 s: {r:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
        }
    }
    for (name, what) in [
        ("w", "an allocated claim of no domain"),
        ("placed", "an allocated claim of a domain"),
        ("plain", "a claim of no domain"),
    ] {
        ensure!(
            as_controller
                .delete(name, &DeleteParams::default())
                .await
                .is_err(),
            "the controller deleted {what}"
        );
    }
    as_controller
        .delete("moving", &DeleteParams::default())
        .await
        .context("the controller's delete of a domain's claim not yet allocated")?;
    for name in ["placed", "plain"] {
        as_admin.delete(name, &DeleteParams::default()).await?;
    }
    // What it writes goes through.
    as_controller
        .patch_status("w", &pp, &merge(json!({"status": {"devices": [ours]}})))
        .await
        .context("the controller's own binding condition")?;
    eprintln!(
        "{} attacks on a claim with the controller's ServiceAccount, 0 accepted",
        attacks.len() + 3
    );
    Ok(())
}
