//! From the arguments to one `kubectl exec`: which node, which graft pod on it, and the
//! graftctl command line.

use anyhow::{bail, Context};
use serde_json::Value;

use crate::args::Args;
use crate::kubectl::Kubectl;

/// The container of graft's pod that has graftctl and graft's state directory
/// (deploy/helm/graft/templates/50-daemonset.yaml).
pub const CONTAINER: &str = "graft-driver";
/// Where the image puts graftctl (deploy/image/Dockerfile, deploy/image/build.sh): a full
/// path, so that the image's PATH does not matter.
pub const GRAFTCTL: &str = "/usr/bin/graftctl";

/// Runs graftctl as `args` asks on the node it names (or the explained pod's), and returns
/// the exit code to leave with.
pub fn run(k: &mut dyn Kubectl, args: &Args) -> anyhow::Result<i32> {
    let node = node(k, args)?;
    let pod = graft_pod(k, args, &node)?;
    let mut cmd = args.kubectl_flags.clone();
    cmd.extend(
        [
            "exec",
            "-n",
            &args.namespace,
            &pod,
            "-c",
            CONTAINER,
            "--",
            GRAFTCTL,
        ]
        .map(str::to_string),
    );
    cmd.extend(args.graftctl.iter().cloned());
    k.run(&cmd)
}

/// `--node`, or for `explain namespace/pod[/container]` the node the pod runs on.
fn node(k: &mut dyn Kubectl, args: &Args) -> anyhow::Result<String> {
    if let Some(n) = &args.node {
        return Ok(n.clone());
    }
    let hint = "graft runs on every node; name one with --node NODE \
                (kubectl get pods -o wide shows a pod's node)";
    let Some((sub, first)) = args.subcommand() else {
        bail!("nothing to run: kubectl graft --help");
    };
    let pod_ref = first.filter(|a| sub == "explain" && a.contains('/') && !a.contains("://"));
    let Some(pod_ref) = pod_ref else {
        bail!("{sub}: which node? {hint}");
    };
    let mut parts = pod_ref.split('/');
    let (Some(ns), Some(name)) = (parts.next(), parts.next()) else {
        bail!("explain {pod_ref:?}: expected namespace/pod[/container]");
    };
    if ns.is_empty() || name.is_empty() {
        bail!("explain {pod_ref:?}: expected namespace/pod[/container]");
    }
    let mut cmd = args.kubectl_flags.clone();
    cmd.extend(["get", "pod", name, "-n", ns, "-o", "json"].map(str::to_string));
    let out = k
        .capture(&cmd)
        .with_context(|| format!("finding the node of pod {ns}/{name}"))?;
    let pod: Value = serde_json::from_str(&out).context("kubectl get pod: not JSON")?;
    match pod["spec"]["nodeName"].as_str() {
        Some(n) if !n.is_empty() => Ok(n.to_string()),
        _ => bail!(
            "pod {ns}/{name} is not scheduled to a node yet, so graft has done nothing for it"
        ),
    }
}

/// The running graft pod on `node` that has graftctl's container; the newest during a
/// rolling update (the surge pod runs beside its predecessor).
fn graft_pod(k: &mut dyn Kubectl, args: &Args, node: &str) -> anyhow::Result<String> {
    let mut cmd = args.kubectl_flags.clone();
    cmd.extend(
        [
            "get",
            "pods",
            "-n",
            &args.namespace,
            "-l",
            &args.selector,
            "--field-selector",
            &format!("spec.nodeName={node}"),
            "-o",
            "json",
        ]
        .map(str::to_string),
    );
    let out = k.capture(&cmd).context("finding graft's pod")?;
    let list: Value = serde_json::from_str(&out).context("kubectl get pods: not JSON")?;
    let items = list["items"].as_array().cloned().unwrap_or_default();
    // The selector may catch other graft pods (a chart's other DaemonSets share labels):
    // only a pod with graftctl's container will do.
    let with_ctl: Vec<&Value> = items
        .iter()
        .filter(|p| {
            p["spec"]["containers"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["name"] == CONTAINER))
        })
        .collect();
    let mut running: Vec<&Value> = with_ctl
        .iter()
        .copied()
        .filter(|p| {
            p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null()
        })
        .collect();
    // RFC 3339 in UTC, as the API server writes it: the text sorts as the time.
    running.sort_by_key(|p| {
        p["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or("")
            .to_string()
    });
    if let Some(p) = running.last() {
        return p["metadata"]["name"]
            .as_str()
            .map(str::to_string)
            .context("kubectl get pods: a pod without a name");
    }
    let ns = &args.namespace;
    if let Some(p) = with_ctl.first() {
        let name = p["metadata"]["name"].as_str().unwrap_or("?");
        let phase = p["status"]["phase"].as_str().unwrap_or("Unknown");
        let state = if p["metadata"]["deletionTimestamp"].is_null() {
            phase.to_string()
        } else {
            format!("{phase}, terminating")
        };
        bail!(
            "graft's pod {name} on node {node} is not running ({state}): \
             kubectl -n {ns} describe pod {name}"
        );
    }
    bail!(
        "no graft pod on node {node} (namespace {ns}, selector {}, container {CONTAINER}): \
         is graft installed there? (kubectl get node {node}; -n for graft's namespace; \
         kubectl -n {ns} get pods -o wide)",
        args.selector
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{Fake, Pod};

    fn args(a: &[&str]) -> Args {
        Args::parse(a.iter().map(|s| s.to_string())).unwrap()
    }

    fn strs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    fn cluster() -> Fake {
        let mut app = Pod::graft("web", "n2", "2026-01-01T00:00:00Z");
        (app.namespace, app.labels, app.containers) =
            ("demo".into(), Default::default(), vec!["app".into()]);
        Fake {
            pods: vec![
                Pod::graft("graft-aaaaa", "n1", "2026-01-01T00:00:00Z"),
                Pod::graft("graft-bbbbb", "n2", "2026-01-01T00:00:00Z"),
                app,
            ],
            ..Fake::default()
        }
    }

    #[test]
    fn devices_on_a_named_node() {
        let mut k = cluster();
        let code = run(
            &mut k,
            &args(&["devices", "--node", "n1", "-o", "wide", "--context", "c"]),
        )
        .unwrap();
        assert_eq!(code, 0);
        assert_eq!(
            strs(&k.calls[0]),
            [
                "--context=c",
                "get",
                "pods",
                "-n",
                "graft-system",
                "-l",
                "app.kubernetes.io/name=graft",
                "--field-selector",
                "spec.nodeName=n1",
                "-o",
                "json"
            ]
        );
        assert_eq!(
            strs(&k.calls[1]),
            [
                "--context=c",
                "exec",
                "-n",
                "graft-system",
                "graft-aaaaa",
                "-c",
                "graft-driver",
                "--",
                "/usr/bin/graftctl",
                "devices",
                "-o",
                "wide"
            ]
        );
    }

    #[test]
    fn explain_finds_the_pods_node() {
        let mut k = cluster();
        k.exec_code = 1;
        // graftctl's own failure (exit 1) is kubectl graft's exit code.
        assert_eq!(run(&mut k, &args(&["explain", "demo/web/app"])).unwrap(), 1);
        assert_eq!(
            strs(&k.calls[0]),
            ["get", "pod", "web", "-n", "demo", "-o", "json"]
        );
        assert!(
            k.calls[1].contains(&"spec.nodeName=n2".to_string()),
            "{:?}",
            k.calls
        );
        assert_eq!(
            &strs(&k.calls[2])[3..],
            [
                "graft-bbbbb",
                "-c",
                "graft-driver",
                "--",
                "/usr/bin/graftctl",
                "explain",
                "demo/web/app"
            ]
        );
        assert!(k.stderr.is_empty());

        let e = run(&mut cluster(), &args(&["explain", "demo/nope"])).unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("pod demo/nope") && e.contains("NotFound"), "{e}");
        let e = run(&mut cluster(), &args(&["explain", "containerd://abc"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--node"), "{e}");
    }

    #[test]
    fn the_newest_running_pod_and_errors_naming_what_is_missing() {
        let mut k = cluster();
        // A rolling update: the surge pod beside its predecessor, a third one terminating.
        k.pods
            .push(Pod::graft("graft-new", "n1", "2026-02-01T00:00:00Z"));
        let mut gone = Pod::graft("graft-gone", "n1", "2026-03-01T00:00:00Z");
        gone.deleting = true;
        k.pods.push(gone);
        // graft's MPS DaemonSet shares the node, not graftctl's container.
        let mut mps = Pod::graft("graft-mps-x", "n1", "2026-04-01T00:00:00Z");
        mps.containers = vec!["graft-mps".into()];
        k.pods.push(mps);
        run(&mut k, &args(&["status", "--node=n1"])).unwrap();
        assert_eq!(k.calls[1][3], "graft-new");

        let e = run(&mut cluster(), &args(&["devices", "--node", "n9"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no graft pod on node n9") && e.contains("is graft installed there?"),
            "{e}"
        );
        let e = run(
            &mut cluster(),
            &args(&["devices", "-n", "other", "--node", "n1"]),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("namespace other"), "{e}");
        let e = run(&mut cluster(), &args(&["devices"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("devices: which node?") && e.contains("--node"),
            "{e}"
        );

        let mut k = cluster();
        k.pods[0].phase = "Pending".into();
        let e = run(&mut k, &args(&["devices", "--node", "n1"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("graft-aaaaa on node n1 is not running (Pending)"),
            "{e}"
        );
    }
}
