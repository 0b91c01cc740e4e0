//! A recording fake of kubectl for the unit tests: pods held in memory, every call kept.
//!
//! It needs what kubectl and the API server need, and fails as they do:
//! - `get pods` lists only with a namespace (`-n`; kubectl would fall back to the
//!   kubeconfig's, which graft's namespace never is), a label selector of `key=value` terms
//!   joined by commas, and a field selector; Pods support `spec.nodeName`, and an unsupported
//!   field is a BadRequest ("Field Selectors", kubernetes.io: concepts/overview/
//!   working-with-objects/field-selectors). An empty selection is an empty `items` list,
//!   not an error, with `-o json`.
//! - `get pod NAME` of a missing pod fails with `Error from server (NotFound): pods "NAME"
//!   not found` (kubectl get; exit 1).
//! - `exec` needs the pod in the namespace, the container in the pod and the pod running;
//!   otherwise kubectl prints the error and exits 1. With the command run, kubectl exits with
//!   the command's exit code (kubernetes/kubernetes PR 26541, "Return container command exit
//!   codes in kubectl run/exec").
//! - `--context` and `--kubeconfig` are global flags, accepted before the verb ("kubectl
//!   options", kubernetes.io reference).

use std::collections::BTreeMap;

use anyhow::bail;
use serde_json::{json, Value};

use crate::kubectl::Kubectl;

/// One pod the fake API server holds.
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub node: String,
    pub labels: BTreeMap<String, String>,
    pub containers: Vec<String>,
    pub phase: String,
    pub created: String,
    pub deleting: bool,
}

impl Pod {
    /// A running pod of graft's DaemonSet on `node`.
    pub fn graft(name: &str, node: &str, created: &str) -> Pod {
        Pod {
            namespace: "graft-system".into(),
            name: name.into(),
            node: node.into(),
            labels: BTreeMap::from([("app.kubernetes.io/name".into(), "graft".into())]),
            containers: vec!["graft-driver".into(), "graft-nri".into()],
            phase: "Running".into(),
            created: created.into(),
            deleting: false,
        }
    }

    fn json(&self) -> Value {
        let containers: Vec<Value> = self.containers.iter().map(|c| json!({"name": c})).collect();
        let mut meta = json!({
            "namespace": self.namespace, "name": self.name, "labels": self.labels,
            "creationTimestamp": self.created,
        });
        if self.deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": self.node, "containers": containers},
            "status": {"phase": self.phase},
        })
    }
}

/// The fake: its pods, the exit code exec'd commands return, and every call made.
#[derive(Default)]
pub struct Fake {
    pub pods: Vec<Pod>,
    pub exec_code: i32,
    pub calls: Vec<Vec<String>>,
    /// What kubectl would have printed on stderr for a failed `run`.
    pub stderr: Vec<String>,
}

/// The arguments after kubectl's global flags.
fn verb(args: &[String]) -> &[String] {
    let globals = args
        .iter()
        .take_while(|a| a.starts_with("--context=") || a.starts_with("--kubeconfig="))
        .count();
    &args[globals..]
}

/// The value after `flag` in `args`.
fn flag<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1).map(String::as_str)
}

impl Fake {
    fn list(&self, args: &[String]) -> anyhow::Result<String> {
        let (Some(ns), Some(sel), Some(field)) = (
            flag(args, "-n"),
            flag(args, "-l"),
            flag(args, "--field-selector"),
        ) else {
            bail!("fake kubectl: get pods without -n, -l and --field-selector: {args:?}");
        };
        let Some(node) = field.strip_prefix("spec.nodeName=") else {
            bail!("Error from server (BadRequest): {field:?} is not a known field selector");
        };
        let mut terms = Vec::new();
        for t in sel.split(',') {
            let Some((k, v)) = t.split_once('=') else {
                bail!("fake kubectl: selector term {t:?} is not key=value");
            };
            terms.push((k, v));
        }
        let items: Vec<Value> = self
            .pods
            .iter()
            .filter(|p| p.namespace == ns && p.node == node)
            .filter(|p| {
                terms
                    .iter()
                    .all(|(k, v)| p.labels.get(*k).map(String::as_str) == Some(v))
            })
            .map(Pod::json)
            .collect();
        Ok(json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string())
    }

    fn get(&self, name: &str, args: &[String]) -> anyhow::Result<String> {
        let Some(ns) = flag(args, "-n") else {
            bail!("fake kubectl: get pod without -n: {args:?}");
        };
        match self
            .pods
            .iter()
            .find(|p| p.namespace == ns && p.name == name)
        {
            Some(p) => Ok(p.json().to_string()),
            None => bail!("Error from server (NotFound): pods {name:?} not found"),
        }
    }
}

impl Kubectl for Fake {
    fn capture(&mut self, args: &[String]) -> anyhow::Result<String> {
        self.calls.push(args.to_vec());
        let v = verb(args);
        if flag(v, "-o") != Some("json") {
            bail!("fake kubectl: only -o json is read back: {args:?}");
        }
        match v {
            [get, pods, ..] if get == "get" && pods == "pods" => self.list(v),
            [get, pod, name, ..] if get == "get" && pod == "pod" => self.get(name, v),
            _ => bail!("fake kubectl: unexpected call {args:?}"),
        }
    }

    fn run(&mut self, args: &[String]) -> anyhow::Result<i32> {
        self.calls.push(args.to_vec());
        let v = verb(args);
        let Some(dashes) = v.iter().position(|a| a == "--") else {
            bail!("fake kubectl: exec without `--` before the command: {args:?}");
        };
        let (Some("exec"), Some(ns), Some(container)) =
            (v.first().map(String::as_str), flag(v, "-n"), flag(v, "-c"))
        else {
            bail!("fake kubectl: expected exec -n NS POD -c CONTAINER: {args:?}");
        };
        // The pod is the one word before `--` that is no flag's value.
        let pod = v[1..dashes]
            .iter()
            .enumerate()
            .find(|(i, a)| !a.starts_with('-') && !["-n", "-c"].contains(&v[*i].as_str()))
            .map(|(_, a)| a.as_str())
            .unwrap_or_default();
        let err = match self
            .pods
            .iter()
            .find(|p| p.namespace == ns && p.name == pod)
        {
            None => format!("Error from server (NotFound): pods {pod:?} not found"),
            Some(p) if !p.containers.iter().any(|c| c == container) => {
                format!("error: unable to upgrade connection: container not found ({container:?})")
            }
            Some(p) if p.phase != "Running" => {
                format!(
                    "error: cannot exec into a container in a completed pod; current phase is {}",
                    p.phase
                )
            }
            Some(_) => return Ok(self.exec_code),
        };
        self.stderr.push(err);
        Ok(1)
    }
}
