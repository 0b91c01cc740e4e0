//! MPS tenancy's admission policies (templates/56-mps-tenancy.yaml): every request of
//! graft's GPU classes gets the toleration of its own namespace's tenancy, and no claim may
//! tolerate another namespace's, which would let it onto a GPU that namespace shares.

use anyhow::ensure;
use graft_integration::apiserver::{self, ControlPlane};
use graft_integration::cluster::Kubernetes;
use graft_integration::Testbed;

use super::{install, kubectl_file, refused_by, until_active};

const KEY: &str = "graft.dev/mps-tenant";

/// A claim in namespace `ns` whose `requests` are given as YAML flow.
fn claim(ns: &str, name: &str, requests: &str) -> String {
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {name}, \
         namespace: {ns}}}\nspec:\n  devices:\n    requests: {requests}\n"
    )
}

/// The claim as the API server would store it (server-side dry run), as JSON.
fn admitted(cp: &ControlPlane, yaml: &str) -> anyhow::Result<serde_json::Value> {
    let out = kubectl_file(
        cp,
        "claim.yaml",
        yaml,
        &["create", "--dry-run=server", "-o", "json"],
    )?;
    Ok(serde_json::from_str(&out)?)
}

/// The tolerations of graft's key, as `value` strings, at `pointer` below the requests.
fn tenancy(claim: &serde_json::Value, pointer: &str) -> Vec<String> {
    claim
        .pointer(&format!("/spec/devices/requests{pointer}/tolerations"))
        .and_then(|t| t.as_array())
        .into_iter()
        .flatten()
        .filter(|t| t["key"] == KEY)
        .map(|t| format!("{}={}:{}", t["operator"], t["value"], t["effect"]).replace('"', ""))
        .collect()
}

#[test]
fn mps_tenancy_tolerates_only_the_claims_own_namespace() -> anyhow::Result<()> {
    tolerates_only_own_namespace(super::control_plane()?, "v1")
}

/// The same on Kubernetes 1.34, the oldest graft supports, with the gates README's table
/// names: its CEL has no flatten() and its API server panicked on a patch value holding
/// objects, both of which the chart's policies once used.
#[test]
fn mps_tenancy_tolerates_only_the_claims_own_namespace_on_kubernetes_1_34() -> anyhow::Result<()> {
    let cp = apiserver::named_on("hostile_chart_1_34", Kubernetes::V1_34)?;
    tolerates_only_own_namespace(cp, "v1beta1")
}

/// The policies on `cp`, whose MutatingAdmissionPolicy API is of version `map`.
fn tolerates_only_own_namespace(cp: &ControlPlane, map: &str) -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let yaml = tb.render_chart(&[
        "--set",
        "backends.nvidia=true",
        "--set",
        "nvidia.mps=all",
        "--api-versions",
        &format!("admissionregistration.k8s.io/{map}/MutatingAdmissionPolicy"),
        "--show-only",
        "templates/56-mps-tenancy.yaml",
    ])?;
    install(cp, "mps-tenancy.yaml", &yaml)?;
    for ns in ["mps-a", "mps-b"] {
        let _ = cp.kubectl(&["create", "namespace", ns]);
    }
    let gpu = "[{name: gpu, exactly: {deviceClassName: gpu.graft.dev}}]";
    let own = ["Equal=mps-a:NoSchedule".to_string()];
    until_active(|| {
        Ok(tenancy(&admitted(cp, &claim("mps-a", "probe", gpu))?, "/0/exactly") == own)
    })?;
    // The validating policy reaches admission on its own time, apart from the mutating one
    // (CI once saw a foreign toleration accepted on a loaded 1.34 API server): wait for it too.
    let foreign = format!(
        "[{{name: gpu, exactly: {{deviceClassName: gpu.graft.dev, tolerations: [{{key: {KEY}, \
         operator: Exists}}]}}}}]"
    );
    until_active(|| Ok(admitted(cp, &claim("mps-b", "probe", &foreign)).is_err()))?;

    // Added beside the claim's own tolerations, to each request of graft's classes and to
    // each firstAvailable alternative of them; once, when the claim already has it.
    let c = admitted(
        cp,
        &claim(
            "mps-a",
            "mixed",
            "[{name: gpu, exactly: {deviceClassName: graft.dev, tolerations: [{key: x, \
             operator: Exists}]}}, {name: fuse, exactly: {deviceClassName: fuse.graft.dev}}, \
             {name: alt, firstAvailable: [{name: fuse, deviceClassName: fuse.graft.dev}, \
             {name: gpu, deviceClassName: gpu.graft.dev}]}]",
        ),
    )?;
    ensure!(tenancy(&c, "/0/exactly") == own, "{c:#}");
    ensure!(
        c.pointer("/spec/devices/requests/0/exactly/tolerations/0/key") == Some(&"x".into()),
        "{c:#}"
    );
    ensure!(
        c.pointer("/spec/devices/requests/1/exactly/tolerations")
            .is_none(),
        "{c:#}"
    );
    ensure!(
        c.pointer("/spec/devices/requests/2/firstAvailable/0/tolerations")
            .is_none(),
        "{c:#}"
    );
    ensure!(tenancy(&c, "/2/firstAvailable/1") == own, "{c:#}");
    let already = format!(
        "[{{name: gpu, exactly: {{deviceClassName: gpu.graft.dev, tolerations: [{{key: {KEY}, \
         operator: Equal, value: mps-a, effect: NoSchedule}}]}}}}]"
    );
    let c = admitted(cp, &claim("mps-a", "already", &already))?;
    ensure!(tenancy(&c, "/0/exactly") == own, "{c:#}");

    // Another namespace's tenancy, by value, by Exists, or by tolerating every taint: refused.
    let policy = "graft-mps-tenancy";
    for (what, tolerations) in [
        (
            "another namespace's value",
            format!("{{key: {KEY}, operator: Equal, value: mps-a}}"),
        ),
        (
            "Exists on the key",
            format!("{{key: {KEY}, operator: Exists}}"),
        ),
        ("every taint", "{operator: Exists}".to_string()),
    ] {
        let requests = format!(
            "[{{name: gpu, exactly: {{deviceClassName: gpu.graft.dev, tolerations: [{tolerations}]}}}}]"
        );
        let r = admitted(cp, &claim("mps-b", "foreign", &requests)).map(|c| c.to_string());
        refused_by(policy, r, what)?;
        let alt = format!(
            "[{{name: alt, firstAvailable: [{{name: gpu, deviceClassName: gpu.graft.dev, \
             tolerations: [{tolerations}]}}]}}]"
        );
        let r = admitted(cp, &claim("mps-b", "foreign", &alt)).map(|c| c.to_string());
        refused_by(policy, r, &format!("{what}, in firstAvailable"))?;
    }
    // Other drivers' classes keep whatever they tolerate.
    let other = "[{name: nic, exactly: {deviceClassName: nic.example.com, tolerations: \
                 [{operator: Exists}]}}]";
    let c = admitted(cp, &claim("mps-b", "other", other))?;
    ensure!(
        c.pointer("/spec/devices/requests/0/exactly/tolerations")
            .and_then(|t| t.as_array())
            .map(Vec::len)
            == Some(1),
        "{c:#}"
    );
    Ok(())
}
