//! `kubectl graft` end to end without a cluster: the plugin binary runs a fake kubectl (a
//! shell script, through `KUBECTL`) whose `exec` runs the real graftctl on a state directory.
//!
//! The fake kubectl needs what kubectl and the API server need and fails as they do:
//! - `get pods` with `-n`, `-l` and `--field-selector spec.nodeName=<node>` (Pods support that
//!   field: kubernetes.io, "Field Selectors"); a node without graft's pod is an empty list
//!   with `-o json`, not an error;
//! - `get pod NAME -n NS -o json` of a missing pod: `Error from server (NotFound): pods "NAME"
//!   not found` on stderr, exit 1;
//! - `exec -n NS POD -c CONTAINER -- CMD...` of another pod or container fails (exit 1); run,
//!   kubectl prints `command terminated with exit code N` and exits N (kubernetes/kubernetes
//!   PR 26541; kubernetes/kubectl issue 1726 shows the message).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use anyhow::{ensure, Context};
use graft_integration::mounts::Scratch;
use graft_integration::testbed::workspace_bin;
use graft_record::containers::CONTAINER_ENTRY_VERSION;
use graft_record::containers::{write_entry, AppliedEdits, ContainerEntry, PodRef};
use graft_record::devices::write_snapshot;

const FAKE_KUBECTL: &str = r#"#!/bin/sh
# Fake kubectl for kubectl graft's test; see the header of kubectl_graft.rs.
echo "$*" >> "$FAKE_DIR/calls"
while case "$1" in --context=*|--kubeconfig=*) true;; *) false;; esac; do shift; done
case "$1 $2" in
"get pods")
  [ "$3 $4 $5 $6 $7 $9 ${10}" = "-n graft-system -l app.kubernetes.io/name=graft --field-selector -o json" ] \
    || { echo "error: fake kubectl: unexpected $*" >&2; exit 1; }
  if [ "$8" = "spec.nodeName=node-a" ]; then cat "$FAKE_DIR/graft-pods.json"
  else echo '{"apiVersion":"v1","kind":"List","items":[]}'; fi ;;
"get pod")
  if [ "$3 $4 $5" = "web -n demo" ]; then
    echo '{"kind":"Pod","metadata":{"name":"web","namespace":"demo"},"spec":{"nodeName":"node-a"}}'
  else echo "Error from server (NotFound): pods \"$3\" not found" >&2; exit 1; fi ;;
"exec -n")
  [ "$3 $4 $5 $6 $7 $8" = "graft-system graft-x1 -c graft-driver -- /usr/bin/graftctl" ] \
    || { echo "Error from server (NotFound): pods \"$4\" not found" >&2; exit 1; }
  shift 8
  "$FAKE_GRAFTCTL" --state-dir "$FAKE_DIR/state" "$@"
  rc=$?
  [ $rc -eq 0 ] || echo "command terminated with exit code $rc" >&2
  exit $rc ;;
*) echo "error: fake kubectl: unexpected $*" >&2; exit 1 ;;
esac
"#;

/// Runs kubectl-graft with the fake kubectl; (exit code, stdout, stderr).
fn kubectl_graft(dir: &Path, args: &[&str]) -> anyhow::Result<(i32, String, String)> {
    let out = Command::new(workspace_bin("kubectl-graft")?)
        .args(args)
        .env("KUBECTL", dir.join("kubectl"))
        .env("FAKE_DIR", dir)
        .env("FAKE_GRAFTCTL", workspace_bin("graftctl")?)
        .output()
        .context("running kubectl-graft")?;
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    println!("$ kubectl graft {}\n{o}{e}", args.join(" "));
    Ok((out.status.code().unwrap_or(-1), o, e))
}

#[test]
fn kubectl_graft_runs_graftctl_in_the_nodes_graft_pod() -> anyhow::Result<()> {
    let dir = Scratch::new(
        std::env::temp_dir().join(format!("graft-it-kubectl-graft-{}", std::process::id())),
    )?;
    let kubectl = dir.join("kubectl");
    std::fs::write(&kubectl, FAKE_KUBECTL)?;
    std::fs::set_permissions(&kubectl, std::fs::Permissions::from_mode(0o755))?;
    // graft's pod on node-a during a rolling update: the old one terminating, the new running.
    let pod = |name: &str, created: &str, deleting: bool| {
        let mut p = serde_json::json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"nodeName": "node-a", "containers": [{"name": "graft-driver"}, {"name": "graft-nri"}]},
            "status": {"phase": "Running"},
        });
        if deleting {
            p["metadata"]["deletionTimestamp"] = "2026-01-02T00:00:00Z".into();
        }
        p
    };
    let list = serde_json::json!({"kind": "List", "items": [
        pod("graft-old", "2026-01-01T00:00:00Z", true),
        pod("graft-x1", "2026-01-02T00:00:00Z", false),
    ]});
    std::fs::write(dir.join("graft-pods.json"), list.to_string())?;

    let state = dir.join("state");
    std::fs::create_dir_all(&state)?;
    write_snapshot(&state, &super::snapshot("node-a", &[]))?;
    let id = "ab".repeat(32);
    write_entry(
        &state,
        &ContainerEntry {
            version: CONTAINER_ENTRY_VERSION,
            id: id.clone(),
            pod: PodRef {
                uid: "uid-web".into(),
                namespace: "demo".into(),
                name: "web".into(),
            },
            container: "app".into(),
            injected_ms: 1,
            records: Vec::new(),
            edits: AppliedEdits::default(),
        },
    )?;

    let (code, out, _) = kubectl_graft(&dir, &["devices", "--node", "node-a", "--no-headers"])?;
    ensure!(code == 0 && out.starts_with("testdev-0 "), "{out}");
    let calls = std::fs::read_to_string(dir.join("calls"))?;
    ensure!(
        calls.contains("exec -n graft-system graft-x1 -c graft-driver"),
        "{calls}"
    );

    // explain by the pod's name: the node is the pod's, the container the only one.
    let (code, out, _) = kubectl_graft(&dir, &["--context=prod", "explain", "demo/web"])?;
    ensure!(
        code == 0 && out.contains(&format!("Container:  app ({id})")),
        "{out}"
    );
    let calls = std::fs::read_to_string(dir.join("calls"))?;
    ensure!(
        calls.contains("--context=prod get pod web -n demo -o json"),
        "{calls}"
    );
    let (code, out, _) = kubectl_graft(
        &dir,
        &[
            "explain",
            &format!("containerd://{id}"),
            "--node=node-a",
            "-o",
            "json",
        ],
    )?;
    ensure!(code == 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out)?;
    ensure!(v["container"]["pod"]["name"] == "web", "{v}");

    // graftctl's failure is kubectl graft's, with graftctl's message.
    let (code, _, err) = kubectl_graft(&dir, &["explain", "demo/web/db", "--node", "node-a"])?;
    ensure!(code == 1 && err.contains("no container \"db\""), "{err}");
    // What was not found is named.
    let (code, _, err) = kubectl_graft(&dir, &["status", "--node", "node-b"])?;
    ensure!(
        code == 1
            && err.contains("no graft pod on node node-b")
            && err.contains("is graft installed there?"),
        "{err}"
    );
    let (code, _, err) = kubectl_graft(&dir, &["explain", "demo/gone"])?;
    ensure!(
        code == 1 && err.contains("pods \"gone\" not found"),
        "{err}"
    );
    let (code, _, err) = kubectl_graft(&dir, &["claims"])?;
    ensure!(code == 1 && err.contains("which node?"), "{err}");
    let (code, out, _) = kubectl_graft(&dir, &["--help"])?;
    ensure!(
        code == 0 && out.contains("kubectl graft devices --node NODE"),
        "{out}"
    );
    Ok(())
}
