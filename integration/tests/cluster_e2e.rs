//! End to end on a real single-node Kubernetes (integration/testbed/cluster): graft runs
//! as the DaemonSet from deploy/, the scheduler allocates from its ResourceSlice, the
//! kubelet calls graft-driver, containerd calls graft-nri, and the container starts with
//! its device. Observed through the API, the CRI and crictl only.
//!
//! Needs root, the testbed and the workspace binaries; the README's test command provides
//! them. Set GRAFT_KEEP_CLUSTER=1 to leave the cluster up afterwards.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use graft_integration::Testbed;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(120);

struct Cluster {
    scripts: PathBuf,
    kubectl: PathBuf,
    crictl: PathBuf,
    kubeconfig: PathBuf,
    endpoint: String,
}

fn run(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Cluster {
    fn up() -> anyhow::Result<Self> {
        let tb = Testbed::load()?;
        let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let scripts = top.join("integration/testbed/cluster");
        run(Command::new("bash")
            .arg(scripts.join("cluster.sh"))
            .arg("up"))?;
        let c = Cluster {
            kubectl: tb.k8s.join("kubectl"),
            crictl: tb.crictl.clone(),
            kubeconfig: PathBuf::from("/var/lib/graft-cluster/admin.kubeconfig"),
            endpoint: "unix:///run/graft-cluster/containerd.sock".into(),
            scripts,
        };
        run(Command::new("bash")
            .arg(c.scripts.join("deploy-graft.sh"))
            .arg(top.join("target/debug")))?;
        Ok(c)
    }

    fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        run(Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args))
    }

    fn apply(&self, yaml: &str) -> anyhow::Result<()> {
        let mut child = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .context("stdin")?
            .write_all(yaml.as_bytes())?;
        let out = child.wait_with_output()?;
        ensure!(
            out.status.success(),
            "kubectl apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    fn crictl(&self, args: &[&str]) -> anyhow::Result<String> {
        run(Command::new(&self.crictl)
            .arg("--runtime-endpoint")
            .arg(&self.endpoint)
            .args(args)
            .stderr(Stdio::null()))
    }

    fn pod_phase(&self, name: &str) -> String {
        self.kubectl(&["get", "pod", name, "-o", "jsonpath={.status.phase}"])
            .unwrap_or_default()
    }

    fn wait_phase(&self, name: &str, phase: &str) -> anyhow::Result<()> {
        let start = Instant::now();
        while self.pod_phase(name) != phase {
            if start.elapsed() > WAIT {
                let d = self.kubectl(&["describe", "pod", name]).unwrap_or_default();
                bail!("pod {name} not {phase} after {WAIT:?}:\n{d}");
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Ok(())
    }

    fn wait_gone(&self, kind: &str, name: &str) -> anyhow::Result<()> {
        let start = Instant::now();
        while !self
            .kubectl(&["get", kind, name, "--ignore-not-found", "-o", "name"])?
            .trim()
            .is_empty()
        {
            ensure!(
                start.elapsed() < WAIT,
                "{kind} {name} still there after {WAIT:?}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        Ok(())
    }

    /// The OCI spec containerd stored for a pod's container, after NRI.
    fn runtime_spec(&self, pod: &str, container: &str) -> anyhow::Result<Value> {
        let label = format!("io.kubernetes.pod.name={pod}");
        let id = self.crictl(&["ps", "-a", "-q", "--name", container, "--label", &label])?;
        let id = id.lines().next().context("no such container")?.to_string();
        let v: Value = serde_json::from_str(&self.crictl(&["inspect", &id])?)?;
        Ok(v["info"]["runtimeSpec"].clone())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::env::var_os("GRAFT_KEEP_CLUSTER").is_none() {
            let _ = run(Command::new("bash")
                .arg(self.scripts.join("cluster.sh"))
                .arg("down"));
        }
    }
}

/// A pod whose container `app` uses one device of `class` through a claim template.
fn device_pod(name: &str, class: &str) -> String {
    format!(
        r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: {name}, namespace: default}}
spec:
  spec:
    devices:
      requests:
      - name: dev
        exactly: {{deviceClassName: {class}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  terminationGracePeriodSeconds: 1
  resourceClaims: [{{name: dev, resourceClaimTemplateName: {name}}}]
  containers:
  - name: app
    image: docker.io/library/busybox:test
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "stat -c '%n %t:%T %F' /dev/fuse; dd if=/dev/fuse of=/dev/null count=0 2>/dev/null && echo open-ok; sleep 3600"]
    resources: {{claims: [{{name: dev}}]}}
  - name: other
    image: docker.io/library/busybox:test
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "ls /dev/fuse 2>&1; sleep 3600"]
"#
    )
}

fn logs(c: &Cluster, pod: &str, ctr: &str) -> String {
    c.kubectl(&["logs", pod, "-c", ctr]).unwrap_or_default()
}

fn wait_log(c: &Cluster, pod: &str, ctr: &str, needle: &str) -> anyhow::Result<String> {
    let start = Instant::now();
    loop {
        let l = logs(c, pod, ctr);
        if l.contains(needle) {
            return Ok(l);
        }
        ensure!(
            start.elapsed() < WAIT,
            "{pod}/{ctr} log lacks {needle:?}:\n{l}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn pods_get_their_devices_on_a_real_cluster() -> anyhow::Result<()> {
    let c = Cluster::up()?;

    // One pod, one device: scheduled, prepared, injected into the container that asks.
    c.apply(&device_pod("first", "fuse.graft.dev"))?;
    c.wait_phase("first", "Running")?;
    let app = wait_log(&c, "first", "app", "open-ok")?;
    ensure!(
        app.contains("/dev/fuse a:e5 character special file"),
        "{app}"
    );
    let other = wait_log(&c, "first", "other", "fuse")?;
    ensure!(
        other.contains("No such file"),
        "the container without the claim got the device: {other}"
    );
    let spec = c.runtime_spec("first", "app")?;
    let devs = spec["linux"]["devices"].as_array().context("no devices")?;
    ensure!(
        devs.iter()
            .any(|d| d["path"] == "/dev/fuse" && d["major"] == 10 && d["minor"] == 229),
        "{spec}"
    );
    ensure!(spec["annotations"]["graft.dev/injected"].is_string());
    let other_spec = c.runtime_spec("first", "other")?;
    ensure!(other_spec["annotations"]
        .get("graft.dev/injected")
        .is_none());

    // A second pod for the only fuse device waits until the first is gone, then runs with it.
    c.apply(&device_pod("second", "fuse.graft.dev"))?;
    std::thread::sleep(Duration::from_secs(5));
    ensure!(
        c.pod_phase("second") == "Pending",
        "second pod ran while the device was taken"
    );
    c.kubectl(&["delete", "pod", "first", "--wait=true"])?;
    c.wait_phase("second", "Running")?;
    wait_log(&c, "second", "app", "open-ok")?;

    // Deleting the pod unprepares its claim: the generated claim goes, and so does its record.
    c.kubectl(&["delete", "pod", "second", "--wait=true"])?;
    let start = Instant::now();
    loop {
        let claims = c.kubectl(&["get", "resourceclaims", "-o", "name"])?;
        let records = std::fs::read_dir("/var/lib/graft/claims")
            .map(|d| d.count())
            .unwrap_or(0);
        if claims.trim().is_empty() && records == 0 {
            break;
        }
        ensure!(
            start.elapsed() < WAIT,
            "claims {claims:?} / {records} records left behind"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    c.wait_gone("pod", "second")?;
    Ok(())
}
