//! restrictedDeviceClasses on the cluster's API server: the chart's policy
//! (templates/31-restricted-device-classes.yaml, rendered with two classes restricted)
//! refuses claims and claim templates for them from a namespace without the label, through
//! each way a request names a class, and in every API version the server serves; the label
//! lets exactly its class through. Requests are server-side dry runs: admission runs in full
//! and nothing is stored.

use anyhow::{ensure, Context};
use graft_integration::cluster::gpu::with_bed;
use graft_integration::cluster::{wait_until, Cluster};
use graft_integration::Testbed;

const NS: &str = "restricted-classes";
const RESTRICTED: &str = r#"restrictedDeviceClasses=["graft.dev","kvm.graft.dev"]"#;

/// A ResourceClaim (or, `template`, a ResourceClaimTemplate) in `version` whose one request
/// names `classes`: one as `exactly`, more as `firstAvailable`.
fn claim(version: &str, template: bool, classes: &[&str]) -> String {
    let request = if let [one] = classes {
        // v1beta1 names the class on the request; v1beta2 and v1 under `exactly`.
        if version == "v1beta1" {
            format!("deviceClassName: {one}")
        } else {
            format!("exactly: {{deviceClassName: {one}}}")
        }
    } else {
        let subs: Vec<String> = classes
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{{name: s{i}, deviceClassName: {c}}}"))
            .collect();
        format!("firstAvailable: [{}]", subs.join(", "))
    };
    let spec = format!("devices: {{requests: [{{name: r, {request}}}]}}");
    let (kind, spec) = if template {
        ("ResourceClaimTemplate", format!("spec: {{{spec}}}"))
    } else {
        ("ResourceClaim", spec)
    };
    format!(
        "apiVersion: resource.k8s.io/{version}\nkind: {kind}\nmetadata: {{name: c, namespace: {NS}}}\nspec: {{{spec}}}\n"
    )
}

/// Whether the API server takes `yaml` (a dry run); the refusal's message otherwise.
fn admitted(c: &Cluster, yaml: &str) -> anyhow::Result<Result<(), String>> {
    Ok(
        c.kubectl_with_stdin(&["create", "--dry-run=server", "-f", "-"], yaml)
            .map(drop)
            .map_err(|e| format!("{e:#}")),
    )
}

fn refused(c: &Cluster, yaml: &str, class: &str) -> anyhow::Result<()> {
    match admitted(c, yaml)? {
        Ok(()) => anyhow::bail!("admitted:\n{yaml}"),
        Err(e) => {
            ensure!(
                e.contains(&format!("may not claim devices of class {class}"))
                    && e.contains(&format!("{class}/claim=true")),
                "refused, but not by the class policy naming {class}: {e}"
            );
            Ok(())
        }
    }
}

#[test]
fn restricted_classes_need_the_namespace_label() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let policy = tb.render_chart(&[
        "--show-only",
        "templates/31-restricted-device-classes.yaml",
        "--set-json",
        RESTRICTED,
    ])?;
    // Restricting a class while graft.dev stays open is refused by the chart itself.
    let err = tb
        .render_chart(&["--set-json", r#"restrictedDeviceClasses=["kvm.graft.dev"]"#])
        .err()
        .context("kvm.graft.dev restricted without graft.dev was accepted")?;
    ensure!(format!("{err:#}").contains("but not graft.dev"), "{err:#}");
    with_bed(|bed| {
        let c = &bed.cluster;
        let _ = c.kubectl(&[
            "delete",
            "namespace",
            NS,
            "--wait=true",
            "--ignore-not-found",
        ]);
        c.kubectl(&["create", "namespace", NS])?;
        c.apply(&policy)?;
        let result = (|| -> anyhow::Result<()> {
            // The policy takes effect once the API server has loaded it.
            wait_until("the policy never refused a kvm claim", || {
                Ok(admitted(c, &claim("v1", false, &["kvm.graft.dev"]))?.is_err())
            })?;
            refused(c, &claim("v1", false, &["kvm.graft.dev"]), "kvm.graft.dev")?;
            refused(c, &claim("v1", true, &["kvm.graft.dev"]), "kvm.graft.dev")?;
            refused(c, &claim("v1", false, &["graft.dev"]), "graft.dev")?;
            // An alternative is a request too.
            let either = claim("v1", false, &["fuse.graft.dev", "kvm.graft.dev"]);
            refused(c, &either, "kvm.graft.dev")?;
            // Older versions are converted, not let by.
            let served = c.kubectl(&["api-versions"])?;
            for v in ["v1beta2", "v1beta1"] {
                if served.lines().any(|l| l == format!("resource.k8s.io/{v}")) {
                    refused(c, &claim(v, false, &["kvm.graft.dev"]), "kvm.graft.dev")?;
                    println!("resource.k8s.io/{v} refused too");
                }
            }
            // A class not listed is anyone's.
            admitted(c, &claim("v1", false, &["fuse.graft.dev"]))?
                .map_err(|e| anyhow::anyhow!("fuse refused: {e}"))?;
            // The label opens its class, and only its class.
            c.kubectl(&["label", "namespace", NS, "kvm.graft.dev/claim=true"])?;
            wait_until("the label never let a kvm claim in", || {
                Ok(admitted(c, &claim("v1", false, &["kvm.graft.dev"]))?.is_ok())
            })?;
            admitted(c, &either)?.map_err(|e| anyhow::anyhow!("{e}"))?;
            refused(c, &claim("v1", false, &["graft.dev"]), "graft.dev")?;
            Ok(())
        })();
        let _ = c.kubectl_with_stdin(&["delete", "-f", "-", "--ignore-not-found"], &policy);
        let _ = c.kubectl(&["delete", "namespace", NS, "--wait=false"]);
        result
    })
}
