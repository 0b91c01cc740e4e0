//! The values that fit the chart to a cluster: the schema, scheduling, names, the kubelet's
//! directory, labels, and the refusals that need no cluster.

use anyhow::{ensure, Context};
use graft_integration::Testbed;

use super::chart;

/// The recommended labels every object of the release `graft` carries.
const LABELS: [&str; 6] = [
    "app.kubernetes.io/instance: graft\n",
    "app.kubernetes.io/version: \"v0.1.0\"\n",
    "app.kubernetes.io/component: ",
    "app.kubernetes.io/part-of: graft\n",
    "app.kubernetes.io/managed-by: Helm\n",
    "helm.sh/chart: graft-0.1.0\n",
];

/// `helm template`'s error for `values` (a values file's text), which must fail.
fn refusal(tb: &Testbed, values: &str) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values)?;
    match tb.render_chart(&["-f", file.to_str().context("path")?]) {
        Ok(out) => anyhow::bail!("rendered with {values:?}:\n{out}"),
        Err(e) => Ok(format!("{e:#}")),
    }
}

/// The documents of a rendering that are objects.
fn objects(rendered: &str) -> Vec<&str> {
    rendered
        .split("\n---\n")
        .filter(|d| d.contains("\nkind: "))
        .collect()
}

/// The object of `kind` named `name` in a rendering.
fn object<'a>(rendered: &'a str, kind: &str, name: &str) -> anyhow::Result<&'a str> {
    objects(rendered)
        .into_iter()
        .find(|d| {
            d.contains(&format!("\nkind: {kind}\n"))
                && d.contains(&format!("\nmetadata:\n  name: {name}\n"))
        })
        .with_context(|| format!("no {kind} {name} in:\n{rendered}"))
}

#[test]
fn schema_refuses_unknown_keys_and_bad_values() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    // Each refusal names the key, at whatever depth.
    for (values, names) in [
        ("logFormat: JSON\n", "'/logFormat'"),
        ("tolerration: []\n", "'tolerration'"),
        ("nvidia:\n  dynamicMIG: all\n", "'dynamicMIG'"),
        (
            "nvidia:\n  healthTaintEffect: NoEvict\n",
            "'/nvidia/healthTaintEffect'",
        ),
        ("image:\n  pullPolicy: always\n", "'/image/pullPolicy'"),
        ("deviceClasses: [gpu.graft.io]\n", "'/deviceClasses/0'"),
        ("kubeletDir: var/lib/kubelet\n", "'/kubeletDir'"),
        (
            "podLabels:\n  app.kubernetes.io/name: x\n",
            "'/podLabels/app.kubernetes.io~1name'",
        ),
        (
            "tolerations:\n  - {key: a, operator: Exist}\n",
            "'/tolerations/0/operator'",
        ),
    ] {
        let e = refusal(&tb, values)?;
        ensure!(
            e.contains("values don't meet the specifications of the schema") && e.contains(names),
            "{values:?}: {names} missing from: {e}"
        );
    }
    // What the repository ships passes.
    tb.render_chart(&[])?;
    tb.render_chart(&[
        "-f",
        chart().join("values-gpu.yaml").to_str().context("path")?,
    ])?;
    Ok(())
}

#[test]
fn scheduling_values_reach_both_daemonsets() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let gpu = chart().join("values-gpu.yaml");
    let gpu = gpu.to_str().context("path")?;
    let plain = tb.render_chart(&["-f", gpu, "--set", "nvidia.mps=all"])?;
    // Every DaemonSet has node affinity: graft the one that keeps it off the GPU nodes, the
    // GPU nodes' DaemonSets the one that finds them (helm_chart::pools).
    for name in ["graft", "graft-gpu", "graft-mps"] {
        let ds = object(&plain, "DaemonSet", name)?;
        for want in [
            "      nodeSelector:\n        kubernetes.io/os: linux\n",
            "      tolerations:\n        - effect: NoSchedule\n          key: nvidia.com/gpu\n          operator: Exists\n",
        ] {
            ensure!(ds.contains(want), "{want:?} missing from:\n{ds}");
        }
        ensure!(
            ds.contains("affinity:") && !ds.contains("imagePullSecrets"),
            "{ds}"
        );
        ensure!(!ds.contains("- operator: Exists"), "{ds}");
    }
    let set = tb.render_chart(&[
        "-f",
        gpu,
        "--set",
        "nvidia.mps=all",
        "--set",
        "nodeSelector.pool=gpu",
        "--set-json",
        r#"tolerations=[{"operator":"Exists"}]"#,
        "--set-json",
        r#"affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"zone","operator":"In","values":["a"]}]}]}}}"#,
        "--set",
        "podAnnotations.team=ml",
        "--set",
        "podLabels.cost=gpu",
        "--set",
        "imagePullSecrets[0].name=regcred",
    ])?;
    for ds in [
        object(&set, "DaemonSet", "graft")?,
        object(&set, "DaemonSet", "graft-gpu")?,
        object(&set, "DaemonSet", "graft-mps")?,
    ] {
        for want in [
            "      nodeSelector:\n        kubernetes.io/os: linux\n",
            "        pool: gpu\n",
            "      tolerations:\n        - operator: Exists\n",
            "      affinity:\n        nodeAffinity:\n",
            "- key: zone\n",
            "      annotations:\n        team: ml\n",
            "        cost: gpu\n",
            "      imagePullSecrets:\n        - name: regcred\n",
        ] {
            ensure!(ds.contains(want), "{want:?} missing from:\n{ds}");
        }
    }
    Ok(())
}

#[test]
fn kubelet_dir_moves_every_kubelet_path() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let gpu = chart().join("values-gpu.yaml");
    let moved = tb.render_chart(&[
        "-f",
        gpu.to_str().context("path")?,
        "--set",
        "kubeletDir=/data/kubelet/",
    ])?;
    ensure!(!moved.contains("/var/lib/kubelet"), "{moved}");
    for want in [
        "name: GRAFT_KUBELET_DIR\n              value: /data/kubelet\n",
        "{name: plugins-registry, mountPath: /data/kubelet/plugins_registry}",
        "{name: plugins, mountPath: /data/kubelet/plugins}",
        "hostPath: {path: /data/kubelet/plugins_registry, type: DirectoryOrCreate}",
        "hostPath: {path: /data/kubelet/plugins, type: DirectoryOrCreate}",
    ] {
        ensure!(moved.contains(want), "{want:?} missing from:\n{moved}");
    }
    let plain = tb.render_chart(&[])?;
    ensure!(
        plain.contains("name: GRAFT_KUBELET_DIR\n              value: /var/lib/kubelet\n"),
        "{plain}"
    );
    Ok(())
}

#[test]
fn fullname_override_names_the_release_objects() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let all = [
        "--set",
        "createNamespace=true",
        "--set",
        "requireGraftNri.enabled=true",
        "--set",
        "computeDomains.enabled=true",
    ];
    let mut args = all.to_vec();
    args.extend(["--set", "fullnameOverride=gpu-pool"]);
    let named = tb.render_chart(&args)?;
    for (kind, name) in [
        ("DaemonSet", "gpu-pool"),
        ("ServiceAccount", "gpu-pool"),
        ("ConfigMap", "gpu-pool-devices"),
        ("ClusterRole", "gpu-pool-driver"),
        ("ClusterRoleBinding", "gpu-pool-driver"),
        ("ClusterRole", "gpu-pool-driver-compute-domains"),
        (
            "ValidatingAdmissionPolicy",
            "gpu-pool-resourceslices-own-node",
        ),
        (
            "ValidatingAdmissionPolicyBinding",
            "gpu-pool-events-own-node",
        ),
        (
            "ValidatingAdmissionPolicy",
            "gpu-pool-nodes-own-domain-labels",
        ),
        ("MutatingAdmissionPolicy", "gpu-pool-require-nri"),
        // Fixed: the API's names (docs/configuration.md).
        ("DeviceClass", "fuse.graft.dev"),
    ] {
        object(&named, kind, name)?;
    }
    for want in [
        "serviceAccountName: gpu-pool\n",
        "configMap:\n            name: gpu-pool-devices\n",
        "  kind: ClusterRole\n  name: gpu-pool-driver\n",
        "  - kind: ServiceAccount\n    name: gpu-pool\n",
        "  policyName: gpu-pool-resourceslices-own-node\n",
        "  policyName: gpu-pool-require-nri\n",
    ] {
        ensure!(named.contains(want), "{want:?} missing from:\n{named}");
    }
    // The policies match the renamed service account, and only it.
    ensure!(
        named
            .matches("username == \"system:serviceaccount:graft-system:gpu-pool\"")
            .count()
            == 3,
        "{named}"
    );
    ensure!(!named.contains(":graft\""), "{named}");
    // The default: the names the rest of the repository uses.
    let plain = tb.render_chart(&all)?;
    object(&plain, "DaemonSet", "graft")?;
    object(&plain, "ConfigMap", "graft-devices")?;
    object(
        &plain,
        "ValidatingAdmissionPolicy",
        "graft-resourceslices-own-node",
    )?;
    Ok(())
}

/// Every object the chart renders (the ComputeDomain CRD aside, which graft-compute-domain
/// generates) carries the recommended labels, and the namespace lets graft's pods run.
#[test]
fn every_object_carries_the_recommended_labels() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let gpu = chart().join("values-gpu.yaml");
    let all = tb.render_chart(&[
        "-f",
        gpu.to_str().context("path")?,
        "--set",
        "createNamespace=true",
        "--set",
        "requireGraftNri.enabled=true",
        "--set",
        "nvidia.mps=all",
        "--set",
        "computeDomains.enabled=true",
        "--set",
        "schedulerExtender.enabled=true",
    ])?;
    let mut seen = 0;
    for doc in objects(&all) {
        if doc.contains("# Source: graft/templates/70-compute-domain-crd.yaml") {
            continue;
        }
        seen += 1;
        for want in LABELS {
            ensure!(doc.contains(want), "{want:?} missing from:\n{doc}");
        }
    }
    ensure!(seen > 20, "only {seen} objects in:\n{all}");
    let ns = object(&all, "Namespace", "graft-system")?;
    ensure!(
        ns.contains("pod-security.kubernetes.io/enforce: privileged\n"),
        "{ns}"
    );
    Ok(())
}

/// GPU mode serves the device plugin's names by default: nvidia.com/gpu on gpu.graft.dev
/// and a class per MIG profile under nvidia.com/mig-<profile>, each selecting what
/// graft_api::classes says; the require-graft-nri policy marks pods asking for them.
/// Informational XIDs are a value.
#[test]
fn gpu_classes_serve_the_device_plugins_names() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let gpu = chart().join("values-gpu.yaml");
    let gpu = gpu.to_str().context("path")?;
    let shipped = tb.render_chart(&["-f", gpu, "--set", "requireGraftNri.enabled=true"])?;
    let class = object(&shipped, "DeviceClass", "gpu.graft.dev")?;
    ensure!(
        class.contains("extendedResourceName: nvidia.com/gpu\n"),
        "{class}"
    );
    let mig = object(&shipped, "DeviceClass", "mig-1g.10gb.graft.dev")?;
    ensure!(
        mig.contains("extendedResourceName: nvidia.com/mig-1g.10gb\n"),
        "{mig}"
    );
    let cel = graft_api::classes::mig_profile_cel("1g.10gb");
    ensure!(
        mig.replace("\n          ", " ").contains(&cel),
        "{cel} not in\n{mig}"
    );
    let marks = object(&shipped, "MutatingAdmissionPolicy", "graft-require-nri")?;
    for name in ["'nvidia.com/gpu'", "'nvidia.com/mig-7g.80gb'"] {
        ensure!(marks.contains(name), "{name} not in\n{marks}");
    }
    ensure!(
        shipped.contains(
            "name: GRAFT_HEALTH_INFORMATIONAL_XIDS\n              value: \"13,31,43,45,68,94,109\"\n"
        ),
        "{shipped}"
    );
    // Coexistence turns the guard off, and leaves the names alone.
    let acked = tb.render_chart(&[
        "-f",
        gpu,
        "--set",
        "nvidia.allowDevicePluginCoexistence=true",
        "--set-json",
        "nvidia.informationalXids=[13,43]",
        "--set-json",
        "nvidia.migProfiles=[\"2g.20gb\"]",
        "--set",
        "nvidia.migResourcePrefix=",
    ])?;
    let class = object(&acked, "DeviceClass", "gpu.graft.dev")?;
    ensure!(
        class.contains("extendedResourceName: nvidia.com/gpu\n"),
        "{class}"
    );
    ensure!(
        acked.contains(
            "name: GRAFT_ALLOW_DEVICE_PLUGIN_COEXISTENCE\n              value: \"true\"\n"
        ),
        "the guard is still on:\n{acked}"
    );
    ensure!(object(&acked, "DeviceClass", "mig-1g.10gb.graft.dev").is_err());
    let mig = object(&acked, "DeviceClass", "mig-2g.20gb.graft.dev")?;
    ensure!(!mig.contains("extendedResourceName"), "{mig}");
    ensure!(
        acked.contains("name: GRAFT_HEALTH_INFORMATIONAL_XIDS\n              value: \"13,43\"\n"),
        "{acked}"
    );
    // A profile that is not one is refused by the schema.
    ensure!(tb
        .render_chart(&[
            "-f",
            gpu,
            "--set-json",
            "nvidia.migProfiles=[\"1g.10gb+me\"]"
        ])
        .is_err());
    // Without GPUs graft serves none of NVIDIA's names.
    let plain = tb.render_chart(&[])?;
    ensure!(
        !plain.contains("extendedResourceName: nvidia.com/"),
        "{plain}"
    );
    Ok(())
}

/// The ComputeDomain CRD carries helm's keep policy: `helm uninstall` and turning
/// computeDomains off leave it, and with it every ComputeDomain (deleting a CRD deletes its
/// objects); docs/install.md says when to delete it by hand. Nothing else is kept.
#[test]
fn the_compute_domain_crd_outlives_the_release() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let objs = super::pools::render(&tb, &["--set", "computeDomains.enabled=true"])?;
    let crd = super::pools::find(
        &objs,
        "CustomResourceDefinition",
        "computedomains.resource.graft.dev",
    )
    .context("no ComputeDomain CRD")?;
    ensure!(
        crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep",
        "{crd:#}"
    );
    let kept: Vec<_> = objs
        .iter()
        .filter(|o| o["metadata"]["annotations"]["helm.sh/resource-policy"].is_string())
        .map(|o| o["metadata"]["name"].clone())
        .collect();
    ensure!(kept.len() == 1, "kept by helm: {kept:?}");
    Ok(())
}
