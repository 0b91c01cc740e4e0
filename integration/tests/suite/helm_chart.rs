//! The Helm chart (deploy/helm/graft) is the one source of the plain manifests: deploy/graft,
//! deploy/gpu and deploy/optional are what it renders, and its values do what they say.
//!
//! Needs the testbed's helm (`integration/testbed/setup.sh`). The cluster tests install the
//! chart itself; driver_apiserver's dry run checks the rendered manifests against a real
//! API server.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context};
use graft_integration::Testbed;

mod alerts;
mod docs;
mod extender;
mod observability;
mod pod_security;
mod pools;
mod umbrella;
mod values;

fn top() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chart() -> PathBuf {
    graft_integration::testbed::chart_dir()
}

#[test]
fn plain_manifests_are_what_the_chart_renders() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let out = Command::new("bash")
        .arg(top().join("deploy/helm/generate.sh"))
        .arg("--check")
        .env("HELM", &tb.helm)
        .output()?;
    ensure!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[test]
fn chart_lints() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    for values in [&[][..], &["-f", "values-gpu.yaml"][..]] {
        let out = Command::new(&tb.helm)
            .arg("lint")
            .arg(chart())
            .args(values)
            .current_dir(chart())
            .output()?;
        ensure!(
            out.status.success(),
            "helm lint {values:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

#[test]
fn values_reach_the_daemonset() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    // Defaults: no GPU mode, nothing privileged, no namespace object (helm makes it).
    let plain = tb.render_chart(&[])?;
    ensure!(plain.contains("value: char,files\n"), "{plain}");
    ensure!(!plain.contains("privileged: true"), "{plain}");
    ensure!(!plain.contains("kind: Namespace"), "{plain}");
    ensure!(!plain.contains("MutatingAdmissionPolicy"), "{plain}");

    let gpu = tb.render_chart(&[
        "-f",
        &chart().join("values-gpu.yaml").to_string_lossy(),
        "--set",
        "nvidia.driverRoot=/run/nvidia/driver",
        "--set",
        "nvidia.mps=all",
        "--set",
        "nvidia.imexChannels=8",
        "--set",
        "nriSocket=/run/containerd/nri/nri.sock",
        "--set",
        "logLevel=debug",
        "--set",
        "backends.files=false",
        "--set",
        "deviceClasses={graft.dev,gpu.graft.dev}",
    ])?;
    for want in [
        "value: char,nvidia\n",
        "privileged: true",
        "name: GRAFT_NVIDIA_DRIVER_ROOT\n              value: /run/nvidia/driver",
        "name: GRAFT_NVIDIA_MPS\n              value: \"all\"",
        "name: GRAFT_NVIDIA_IMEX_CHANNELS\n              value: \"8\"",
        "\"--socket\", \"/run/containerd/nri/nri.sock\"",
        "hostPath: {path: /run/containerd/nri, type: DirectoryOrCreate}",
        "value: \"debug\"",
        "limits:\n              memory: 256Mi",
        "name: gpu.graft.dev",
    ] {
        ensure!(gpu.contains(want), "{want:?} missing from:\n{gpu}");
    }
    // The driver root goes to all three containers (graft-nri allows mounts from it, and
    // its validator plans as it does), and to graft-mps (nvidia.mps is on), which runs the
    // MPS daemons in it.
    ensure!(
        gpu.matches("value: /run/nvidia/driver").count() == 4,
        "{gpu}"
    );
    ensure!(!gpu.contains("name: fuse.graft.dev"), "{gpu}");
    // Without a backend there is nothing to run: the chart refuses.
    ensure!(tb
        .render_chart(&[
            "--set",
            "backends.char=false",
            "--set",
            "backends.files=false"
        ])
        .is_err());
    Ok(())
}

#[test]
fn graft_mps_runs_only_where_gpus_are_shared_through_mps() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let gpu_values = chart().join("values-gpu.yaml");
    let gpu_values = gpu_values.to_string_lossy();
    for off in [
        tb.render_chart(&["--set", "nvidia.mps=all"])?,
        tb.render_chart(&["-f", &gpu_values])?,
    ] {
        ensure!(!off.contains("graft-mps"), "{off}");
    }
    let on = tb.render_chart(&[
        "-f",
        &gpu_values,
        "--set",
        "nvidia.mps=0\\,1",
        "--set",
        "nvidia.mpsShmSize=2Gi",
    ])?;
    let mps = on
        .split("---")
        .find(|d| d.contains("name: graft-mps\n"))
        .ok_or_else(|| anyhow::anyhow!("no graft-mps DaemonSet in:\n{on}"))?;
    for want in [
        "kind: DaemonSet",
        "type: OnDelete",
        "hostPID: true",
        "privileged: true",
        "command: [\"/usr/bin/graft-mps\"]",
        "name: GRAFT_ENTER_MOUNT_NS\n              value: parent",
        "name: GRAFT_STATE_DIR\n              value: /var/lib/graft",
        "name: GRAFT_MPS_SHM_SIZE\n              value: \"2Gi\"",
        "priorityClassName: system-node-critical",
        "key: nvidia.com/gpu",
    ] {
        ensure!(mps.contains(want), "{want:?} missing from:\n{mps}");
    }
    Ok(())
}

#[test]
fn admission_policy_version() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let kind = |v: &str| {
        format!("apiVersion: admissionregistration.k8s.io/{v}\nkind: MutatingAdmissionPolicy\n")
    };
    let on = ["--set", "requireGraftNri.enabled=true"];
    // A cluster that does not serve v1 (1.34, 1.35; helm template assumes none does).
    let beta = tb.render_chart(&on)?;
    ensure!(beta.contains(&kind("v1beta1")), "{beta}");
    // One that does (1.36 and later): helm install asks it.
    let mut args = on.to_vec();
    args.extend([
        "--api-versions",
        "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
    ]);
    let ga = tb.render_chart(&args)?;
    ensure!(ga.contains(&kind("v1")), "{ga}");
    // The value overrides what the cluster says.
    args.extend([
        "--set",
        "requireGraftNri.apiVersion=admissionregistration.k8s.io/v1beta1",
    ]);
    let pinned = tb.render_chart(&args)?;
    ensure!(pinned.contains(&kind("v1beta1")), "{pinned}");
    Ok(())
}

/// graft's NRI validator runs beside graft-nri as shipped, with graft-nri's settings (it
/// plans each container as graft-nri does) and nothing more; requireGraftNri then names it.
/// Turned off, it is gone and the policy requires graft-nri alone.
#[test]
fn the_nri_validator_runs_with_graft_nris_settings() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let container = |yaml: &str, name: &str| -> Option<String> {
        let start = yaml.find(&format!("        - name: {name}\n"))?;
        let rest = &yaml[start + 1..];
        let end = rest
            .find("\n        - name: ")
            .or_else(|| rest.find("\n      volumes:"))
            .unwrap_or(rest.len());
        Some(rest[..end].to_string())
    };
    let gpu_values = chart()
        .join("values-gpu.yaml")
        .to_string_lossy()
        .into_owned();
    let extra = [
        "--set",
        "requireGraftNri.enabled=true",
        "--set",
        "nriExtraEnv[0].name=GRAFT_NVIDIA_LDCONFIG",
        "--set",
        "nriExtraEnv[0].value=/sbin/ldconfig",
        "-f",
        &gpu_values,
    ];
    let on = tb.render_chart(&extra)?;
    // The GPU nodes' DaemonSet, where graft-nri has the most settings.
    let gpu = on
        .find("\n  name: graft-gpu\n")
        .map(|i| &on[i..])
        .context("no GPU DaemonSet")?;
    let nri = container(gpu, "graft-nri").context("no graft-nri container")?;
    let val = container(gpu, "graft-nri-validator").context("no validator container")?;
    ensure!(val.contains("\"--validate\"]"), "{val}");
    ensure!(
        !val.contains("GRAFT_METRICS_ADDR"),
        "the validator serves no TCP port: {val}"
    );
    // Every setting of graft-nri's policy reaches the validator alike.
    for want in [
        "name: GRAFT_ALLOWED_MOUNT_ROOTS",
        "name: GRAFT_HOST_ROOT",
        "name: GRAFT_NVIDIA_DRIVER_ROOT",
        "name: GRAFT_NVIDIA_LDCONFIG\n              value: /sbin/ldconfig",
        "capabilities: {drop: [\"ALL\"]}",
        "allowPrivilegeEscalation: false",
    ] {
        ensure!(
            nri.contains(want),
            "{want:?} missing from graft-nri:\n{nri}"
        );
        ensure!(
            val.contains(want),
            "{want:?} missing from the validator:\n{val}"
        );
    }
    ensure!(
        on.contains("\"required-plugins.noderesource.dev/pod\": \"[graft, graft-validator]\""),
        "the policy does not name the validator"
    );
    let mut args = extra.to_vec();
    args.extend(["--set", "nriValidator.enabled=false"]);
    let off = tb.render_chart(&args)?;
    ensure!(container(&off, "graft-nri-validator").is_none(), "{off}");
    ensure!(container(&off, "graft-nri").is_some(), "{off}");
    ensure!(
        off.contains("\"required-plugins.noderesource.dev/pod\": \"[graft]\""),
        "with the validator off the policy must not require it"
    );
    Ok(())
}

/// VFIO passthrough is off as shipped, with sysfs read-only; turned on, it mounts writable
/// exactly the two sysfs paths a rebind writes. Extra volumes and mounts go after the
/// chart's own.
#[test]
fn passthrough_makes_only_the_binding_paths_writable() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let values_gpu = chart().join("values-gpu.yaml");
    let gpu = ["-f", values_gpu.to_str().context("path")?];
    let off = tb.render_chart(&gpu)?;
    ensure!(
        off.contains("name: GRAFT_NVIDIA_PASSTHROUGH\n              value: \"false\""),
        "{off}"
    );
    ensure!(!off.contains("/sys/devices}"), "{off}");
    let mut args = gpu.to_vec();
    args.extend([
        "--set",
        "nvidia.passthrough.enabled=true",
        "--set",
        "nvidia.passthrough.timeoutSeconds=20",
        "--set-json",
        r#"driverExtraVolumes=[{"name":"extra","hostPath":{"path":"/opt/x"}}]"#,
        "--set-json",
        r#"driverExtraVolumeMounts=[{"name":"extra","mountPath":"/host/opt/x"}]"#,
    ]);
    let on = tb.render_chart(&args)?;
    for want in [
        "name: GRAFT_NVIDIA_PASSTHROUGH\n              value: \"true\"",
        "name: GRAFT_NVIDIA_VFIO_TIMEOUT\n              value: \"20\"",
        "- {name: host-sys, mountPath: /sys, readOnly: true}\n            # Passthrough writes these (see the top of this file).\n            - {name: host-pci-drivers, mountPath: /sys/bus/pci/drivers}\n            - {name: host-devices, mountPath: /sys/devices}\n",
        "hostPath: {path: /sys/bus/pci/drivers, type: Directory}",
        "hostPath: {path: /sys/devices, type: Directory}",
        "- {name: run-graft, mountPath: /run/graft}\n            - mountPath: /host/opt/x\n              name: extra\n",
        "emptyDir: {sizeLimit: 1Mi}\n        - hostPath:\n            path: /opt/x\n          name: extra\n",
    ] {
        ensure!(on.contains(want), "{want:?} missing from:\n{on}");
    }
    // Only graft-driver: graft-nri's mounts stay as they were.
    ensure!(on.matches("/sys/devices}").count() == 1, "{on}");
    // Without GPU mode there is nothing to pass through: the chart refuses.
    ensure!(tb
        .render_chart(&["--set", "nvidia.passthrough.enabled=true"])
        .is_err());
    Ok(())
}
