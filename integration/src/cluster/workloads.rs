//! What the cluster tests run and wait for: pods and claim templates as YAML, and the waits
//! that read the cluster (logs, claims unprepared, graft rolled out), shared by the test
//! binaries that use the testbed cluster.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure};

use super::{Cluster, WAIT};

/// The test image: the testbed's static busybox.
pub const BUSYBOX: &str = "docker.io/library/busybox:test";

/// A ResourceClaimTemplate `name` in `namespace` whose request `dev` asks for one device of
/// `class`, only among those matching the CEL expression `cel` when given, and for part of
/// a shared device's consumable capacity when `capacity` (the YAML map of
/// `capacity.requests`) is given.
pub fn claim_template_in(
    namespace: &str,
    name: &str,
    class: &str,
    cel: Option<&str>,
    capacity: Option<&str>,
) -> String {
    let selectors = cel
        .map(|e| format!("\n          selectors:\n          - cel: {{expression: '{e}'}}"))
        .unwrap_or_default();
    let capacity = capacity
        .map(|c| format!("\n          capacity: {{requests: {c}}}"))
        .unwrap_or_default();
    format!(
        r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  spec:
    devices:
      requests:
      - name: dev
        exactly:
          deviceClassName: {class}{selectors}{capacity}
"#
    )
}

/// A ResourceClaimTemplate `name` in `default` whose request `gpus` asks for `count` whole
/// GPUs (`gpu.graft.dev`), all on one NVLink island when `island` (docs/placement.md).
pub fn gpus_template(name: &str, count: u32, island: bool) -> String {
    let constraint = if island {
        "\n      constraints:\n      - requests: [gpus]\n        matchAttribute: graft.dev/nvlinkIsland"
    } else {
        ""
    };
    format!(
        r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: {name}, namespace: default}}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly: {{deviceClassName: gpu.graft.dev, allocationMode: ExactCount, count: {count}}}{constraint}
"#
    )
}

/// [`claim_template_in`] in namespace `default`, without consumable capacity.
pub fn claim_template(name: &str, class: &str, cel: Option<&str>) -> String {
    claim_template_in("default", name, class, cel, None)
}

/// [`claim_template_in`] in namespace `default`.
pub fn claim_template_consuming(
    name: &str,
    class: &str,
    cel: Option<&str>,
    capacity: Option<&str>,
) -> String {
    claim_template_in("default", name, class, cel, capacity)
}

/// A pod `name` in `namespace` whose one container `app` (image `image`) runs `command`
/// with the claim `claim` made from the ResourceClaimTemplate of the same name as the pod.
pub fn one_claim_pod_in(
    namespace: &str,
    name: &str,
    claim: &str,
    image: &str,
    command: &str,
) -> String {
    pod_yaml(namespace, name, claim, image, command, "")
}

/// [`one_claim_pod`] kept to node `node` (a `nodeSelector` on its hostname).
pub fn one_claim_pod_on(name: &str, claim: &str, command: &str, node: &str) -> String {
    let pin = format!("\n  nodeSelector: {{kubernetes.io/hostname: {node}}}");
    pod_yaml("default", name, claim, BUSYBOX, command, &pin)
}

fn pod_yaml(
    namespace: &str,
    name: &str,
    claim: &str,
    image: &str,
    command: &str,
    pin: &str,
) -> String {
    format!(
        r#"---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  terminationGracePeriodSeconds: 1{pin}
  resourceClaims: [{{name: {claim}, resourceClaimTemplateName: {name}}}]
  containers:
  - name: app
    image: {image}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "{command}"]
    resources: {{claims: [{{name: {claim}}}]}}
"#
    )
}

/// [`one_claim_pod_in`] in namespace `default` with busybox.
pub fn one_claim_pod(name: &str, claim: &str, command: &str) -> String {
    one_claim_pod_in("default", name, claim, BUSYBOX, command)
}

/// A pod whose container `app` uses one device of `class` (found at `path`) through a
/// claim template; its two other containers have no claim.
pub fn device_pod(name: &str, class: &str, path: &str) -> String {
    claim_template(name, class, None)
        + &format!(
            r#"---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  terminationGracePeriodSeconds: 1
  resourceClaims: [{{name: dev, resourceClaimTemplateName: {name}}}]
  containers:
  - name: app
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "stat -c '%n %t:%T %F' {path}; dd if={path} of=/dev/null count=0 2>/dev/null && echo open-ok; sleep 3600"]
    resources: {{claims: [{{name: dev}}]}}
  - name: other
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "ls {path} 2>&1; sleep 3600"]
  - name: third
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "ls {path} 2>&1; sleep 3600"]
"#
        )
}

/// The phase of pod `pod` in `ns`, empty when it cannot be read.
pub fn phase(c: &Cluster, ns: &str, pod: &str) -> String {
    c.kubectl(&[
        "-n",
        ns,
        "get",
        "pod",
        pod,
        "-o",
        "jsonpath={.status.phase}",
    ])
    .unwrap_or_default()
}

/// The name of the claim made for pod `pod`'s first claim in `ns`; empty while it has none.
pub fn pod_claim(c: &Cluster, ns: &str, pod: &str) -> anyhow::Result<String> {
    c.kubectl(&[
        "-n",
        ns,
        "get",
        "pod",
        pod,
        "-o",
        "jsonpath={.status.resourceClaimStatuses[0].resourceClaimName}",
    ])
    .map(|s| s.trim().to_string())
}

/// Waits until pod `pod` in `ns` has its first claim; the claim's name.
pub fn wait_pod_claim(c: &Cluster, ns: &str, pod: &str) -> anyhow::Result<String> {
    let mut name = String::new();
    super::wait_until(&format!("{ns}/{pod} got no claim"), || {
        name = pod_claim(c, ns, pod)?;
        Ok(!name.is_empty())
    })?;
    Ok(name)
}

/// `reason: message` of each Event about pod `pod` in `ns`, one per line.
pub fn pod_events(c: &Cluster, ns: &str, pod: &str) -> anyhow::Result<String> {
    c.kubectl(&[
        "-n",
        ns,
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.name={pod}"),
        "-o",
        "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
    ])
}

/// Waits until pod `pod` in `ns` runs; returns how long that took. A failure carries the
/// pod's description and the node's DRA state.
pub fn wait_running(c: &Cluster, ns: &str, pod: &str) -> anyhow::Result<Duration> {
    super::wait_until(&format!("{ns}/{pod} not Running"), || {
        Ok(phase(c, ns, pod) == "Running")
    })
    .map_err(|e| {
        let d = c
            .kubectl(&["-n", ns, "describe", "pod", pod])
            .unwrap_or_default();
        e.context(format!("{d}\n{}", c.dra_state()))
    })
}

/// `kubectl rollout restart` of graft's DaemonSets (the GPU nodes' one too), until their
/// new pods are ready.
pub fn roll_graft(c: &Cluster) -> anyhow::Result<()> {
    c.kubectl(&[
        "-n",
        "graft-system",
        "rollout",
        "restart",
        "daemonset",
        "-l",
        "app.kubernetes.io/name=graft",
    ])?;
    rolled_out(c)
}

/// A pod's container log, empty when it cannot be read (yet).
pub fn logs(c: &Cluster, pod: &str, ctr: &str) -> String {
    c.kubectl(&["logs", pod, "-c", ctr]).unwrap_or_default()
}

/// As [`logs`] for a pod of `namespace`.
pub fn logs_in(c: &Cluster, namespace: &str, pod: &str, ctr: &str) -> String {
    c.kubectl(&["-n", namespace, "logs", pod, "-c", ctr])
        .unwrap_or_default()
}

/// Waits until the container's log holds `needle`; returns the log.
pub fn wait_log(c: &Cluster, pod: &str, ctr: &str, needle: &str) -> anyhow::Result<String> {
    wait_log_in(c, "default", pod, ctr, needle)
}

/// As [`wait_log`] for a pod of `namespace`.
pub fn wait_log_in(
    c: &Cluster,
    namespace: &str,
    pod: &str,
    ctr: &str,
    needle: &str,
) -> anyhow::Result<String> {
    let start = Instant::now();
    loop {
        let l = logs_in(c, namespace, pod, ctr);
        if l.contains(needle) {
            return Ok(l);
        }
        ensure!(
            start.elapsed() < WAIT,
            "{namespace}/{pod}/{ctr} log lacks {needle:?}:\n{l}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Until pod `pod` in `default` has a FailedScheduling Event (`why` says what is expected
/// to keep it from fitting).
pub fn wait_failed_scheduling(c: &Cluster, pod: &str, why: &str) -> anyhow::Result<()> {
    let start = Instant::now();
    let selector = format!("involvedObject.name={pod},reason=FailedScheduling");
    loop {
        let events = c.kubectl(&["get", "events", "--field-selector", &selector, "-o", "name"])?;
        if !events.trim().is_empty() {
            return Ok(());
        }
        if start.elapsed() > WAIT {
            bail!("{pod}: no FailedScheduling with {why}\n{}", c.dra_state());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Sets (`Some(n)`) or removes (`None`) extended resource `name` in Node `node`'s capacity
/// and allocatable, as a device plugin's count shows there (a status patch; the kubelet
/// keeps resources it does not manage).
pub fn set_node_resource(
    c: &Cluster,
    node: &str,
    name: &str,
    count: Option<u32>,
) -> anyhow::Result<()> {
    let v = count.map_or("null".to_string(), |n| format!("\"{n}\""));
    let patch =
        format!(r#"{{"status":{{"capacity":{{"{name}":{v}}},"allocatable":{{"{name}":{v}}}}}}}"#);
    c.kubectl(&[
        "patch",
        "node",
        node,
        "--subresource=status",
        "--type=merge",
        "-p",
        &patch,
    ])?;
    Ok(())
}

/// Until no claim is left in the API and graft holds no record: the kubelet unprepares a
/// deleted pod's claims a little after the API forgets them.
pub fn wait_unprepared(c: &Cluster) -> anyhow::Result<()> {
    wait_claims_left(c, 0)
}

/// Until `left` claims are left in the API and graft holds as many records: those of pods
/// that stay, the others' unprepared.
pub fn wait_claims_left(c: &Cluster, left: usize) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        let claims = c.kubectl(&["get", "resourceclaims", "-A", "-o", "name"])?;
        let records = std::fs::read_dir("/var/lib/graft/claims")
            .map(|d| d.count())
            .unwrap_or(0);
        if claims.lines().filter(|l| !l.trim().is_empty()).count() == left && records == left {
            return Ok(());
        }
        ensure!(
            start.elapsed() < WAIT,
            "claims {claims:?} / {records} records left behind (want {left})"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Waits until graft's DaemonSets have all their pods up to date and ready.
pub fn rolled_out(c: &Cluster) -> anyhow::Result<()> {
    c.kubectl(&[
        "-n",
        "graft-system",
        "rollout",
        "status",
        "daemonset",
        "-l",
        "app.kubernetes.io/name=graft",
        "--timeout=120s",
    ])?;
    Ok(())
}

/// Deletes graft's pods and waits until the DaemonSet has them back: a graft-driver (and
/// graft-nri) restart, with everything its container started gone with it.
pub fn restart_graft(c: &Cluster) -> anyhow::Result<()> {
    c.kubectl(&[
        "-n",
        "graft-system",
        "delete",
        "pod",
        "-l",
        "app.kubernetes.io/name=graft",
        "--wait=true",
    ])?;
    rolled_out(c)
}

/// Every container of graft's pods is ready (its readiness probe passes).
pub fn graft_ready(c: &Cluster) -> anyhow::Result<()> {
    let jsonpath = "jsonpath={range .items[*].status.containerStatuses[*]}{.name}={.ready} {end}";
    let mut last = String::new();
    for _ in 0..60 {
        last = c.kubectl(&[
            "-n",
            "graft-system",
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=graft",
            "-o",
            jsonpath,
        ])?;
        if last.contains("graft-driver=true")
            && last.contains("graft-nri=true")
            && !last.contains("=false")
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    bail!("graft's containers are not all ready: {last}")
}

/// The restart counts of every container in graft-system, as `pod/container=N` words.
pub fn graft_restarts(c: &Cluster) -> anyhow::Result<String> {
    c.kubectl(&[
        "-n",
        "graft-system",
        "get",
        "pods",
        "-o",
        "jsonpath={range .items[*]}{range .status.containerStatuses[*]}{.name}={.restartCount} {end}{end}",
    ])
}

/// Events (events.k8s.io) of `reason` in every namespace, one `KIND NAME NOTE` line each.
pub fn events(c: &Cluster, reason: &str) -> anyhow::Result<String> {
    c.kubectl(&[
        "get",
        "events.events.k8s.io",
        "-A",
        "--field-selector",
        &format!("reason={reason}"),
        "-o",
        "custom-columns=KIND:.regarding.kind,NAME:.regarding.name,NOTE:.note",
        "--no-headers",
    ])
}

/// The taints on `device` in graft's ResourceSlices, as `key=value:effect` lines.
pub fn taints(c: &Cluster, device: &str) -> anyhow::Result<String> {
    let json = c.kubectl(&["get", "resourceslices", "-o", "json"])?;
    let v: serde_json::Value = serde_json::from_str(&json)?;
    let mut out = String::new();
    for s in v["items"].as_array().into_iter().flatten() {
        for d in s["spec"]["devices"].as_array().into_iter().flatten() {
            if d["name"] != device {
                continue;
            }
            for t in d["taints"].as_array().into_iter().flatten() {
                out += &format!(
                    "{}={}:{}\n",
                    t["key"].as_str().unwrap_or(""),
                    t["value"].as_str().unwrap_or(""),
                    t["effect"].as_str().unwrap_or("")
                );
            }
        }
    }
    Ok(out)
}

/// The names of the devices in graft's ResourceSlices.
pub fn published_devices(c: &Cluster) -> anyhow::Result<Vec<String>> {
    let json = c.kubectl(&["get", "resourceslices", "-o", "json"])?;
    let v: serde_json::Value = serde_json::from_str(&json)?;
    let mut out: Vec<String> = v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
        .filter_map(|d| d["name"].as_str().map(str::to_string))
        .collect();
    out.sort();
    Ok(out)
}
