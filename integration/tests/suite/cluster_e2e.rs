//! End to end on a real single-node Kubernetes (integration/testbed/cluster): graft runs
//! as the DaemonSet from deploy/, the scheduler allocates from its ResourceSlice, the
//! kubelet calls graft-driver, containerd calls graft-nri, and the container starts with
//! its device. Observed through the API, the CRI and crictl only.
//!
//! Needs root, the testbed and the workspace binaries; the README's test command provides
//! them. Set GRAFT_KEEP_CLUSTER=1 to leave the cluster up afterwards.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use graft_integration::cluster::workloads::{
    device_pod, graft_ready, one_claim_pod, roll_graft, wait_log, wait_unprepared,
};
use graft_integration::cluster::{wait_until, Cluster, Kubernetes, WAIT};
use graft_integration::scrape;

mod events;
mod extended_resource;
mod graftctl;

/// The metrics graft serves on this node's port (hostNetwork) once every `(series, min)`
/// holds: a new instance binds the port only when the old one has exited. A failure names
/// the series that fell short.
fn scrape_at_least(c: &Cluster, port: u16, want: &[(&str, f64)]) -> anyhow::Result<String> {
    let mut last = String::new();
    let mut short = Vec::new();
    for _ in 0..60 {
        match c
            .metrics_addr(port)
            .and_then(|a| scrape::tcp_get(&a, "/metrics"))
        {
            Ok((200, m)) => {
                short = want
                    .iter()
                    .filter(|(s, min)| !scrape::value(&m, s).is_some_and(|v| v >= *min))
                    .map(|(s, min)| format!("{s} >= {min} (is {:?})", scrape::value(&m, s)))
                    .collect();
                if short.is_empty() {
                    return Ok(m);
                }
                last = m;
            }
            Ok((code, m)) => last = format!("HTTP {code}: {m}"),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let head: Vec<&str> = last.lines().take(40).collect();
    bail!(
        "port {port} after 60 s: not {}; last answer:\n{}",
        short.join(", "),
        head.join("\n")
    )
}

fn fuse_pod(name: &str) -> String {
    device_pod(name, "fuse.graft.dev", "/dev/fuse")
}

#[test]
fn end_to_end_on_kubernetes_1_37() -> anyhow::Result<()> {
    // The host's one testbed cluster is ours until the test ends (cluster_gpu waits).
    let _turn = graft_integration::cluster::gpu::own_cluster();
    let c = Cluster::up()?;
    end_to_end(&c)
}

/// The same flow on the oldest minor graft supports, with the chart as shipped and the
/// gates README's support table says to turn on there (cluster.sh lists them).
#[test]
fn end_to_end_on_kubernetes_1_34() -> anyhow::Result<()> {
    let _turn = graft_integration::cluster::gpu::own_cluster();
    let c = Cluster::up_on(Kubernetes::V1_34)?;
    let version = c.kubectl(&["version", "-o", "json"])?;
    ensure!(
        version.contains("\"gitVersion\": \"v1.34."),
        "not a 1.34 cluster: {version}"
    );
    end_to_end(&c)
}

/// graft as a user meets it on `c`: pods get their devices, graft rolls, restarts and
/// outages heal.
fn end_to_end(c: &Cluster) -> anyhow::Result<()> {
    // One pod, one device: scheduled, prepared, injected into the container that asks.
    c.apply(&fuse_pod("first"))?;
    c.wait_phase("first", "Running")?;
    let app = wait_log(c, "first", "app", "open-ok")?;
    ensure!(
        app.contains("/dev/fuse a:e5 character special file"),
        "{app}"
    );
    for ctr in ["other", "third"] {
        let l = wait_log(c, "first", ctr, "fuse")?;
        ensure!(
            l.contains("No such file"),
            "{ctr}, without the claim, got the device: {l}"
        );
        let spec = c.runtime_spec("first", ctr)?;
        ensure!(spec["annotations"].get("graft.dev/injected").is_none());
    }
    let spec = c.runtime_spec("first", "app")?;
    let devs = spec["linux"]["devices"].as_array().context("no devices")?;
    ensure!(
        devs.iter()
            .any(|d| d["path"] == "/dev/fuse" && d["major"] == 10 && d["minor"] == 229),
        "{spec}"
    );
    ensure!(spec["annotations"]["graft.dev/injected"].is_string());
    // An operator's view of it, from graft's pod.
    graftctl::shows_fuse_pod(c, "first")?;

    // Both daemons passed their probes, and their metrics on the node's ports saw it.
    graft_ready(c)?;
    let ok = r#"graft_driver_prepare_duration_seconds_count{result="ok"}"#;
    scrape_at_least(
        c,
        9477,
        &[
            (ok, 1.0),
            ("graft_driver_nri_plugin_connected", 1.0),
            ("graft_driver_prepared_claims", 1.0),
        ],
    )?;
    let created = r#"graft_nri_request_duration_seconds_count{event="create_container"}"#;
    scrape_at_least(
        c,
        9478,
        &[
            ("graft_nri_containers_injected_total", 1.0),
            (created, 3.0),
            ("graft_nri_containers_skipped_total", 2.0),
            ("graft_nri_synchronized", 1.0),
        ],
    )?;

    // A second pod for the only fuse device waits until the first is gone, then runs with it.
    c.apply(&fuse_pod("second"))?;
    std::thread::sleep(Duration::from_secs(5));
    ensure!(
        c.pod_phase("second") == "Pending",
        "second pod ran while the device was taken"
    );
    c.kubectl(&["delete", "pod", "first", "--wait=true"])?;
    c.wait_phase("second", "Running")?;
    wait_log(c, "second", "app", "open-ok")?;

    // Deleting the pod unprepares its claim: the generated claim goes, and so does its record.
    c.kubectl(&["delete", "pod", "second", "--wait=true"])?;
    wait_unprepared(c)?;
    c.wait_gone("pod", "second")?;

    // A device-plugin-style request (resources.limits) through the class's extendedResourceName.
    extended_resource::fuse_by_limit(c)?;

    // One claim, two requests split over two containers; an init container uses one of
    // them; a third container has none.
    c.apply(SPLIT_POD)?;
    c.wait_phase("split", "Running")?;
    let has = |ctr: &str, path: &str| -> anyhow::Result<bool> {
        let spec = c.runtime_spec("split", ctr)?;
        Ok(spec["linux"]["devices"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["path"] == path)))
    };
    ensure!(has("init", "/dev/fuse")? && !has("init", "/dev/net/tun")?);
    ensure!(has("uses-fuse", "/dev/fuse")? && !has("uses-fuse", "/dev/net/tun")?);
    ensure!(has("uses-tun", "/dev/net/tun")? && !has("uses-tun", "/dev/fuse")?);
    ensure!(!has("none", "/dev/fuse")? && !has("none", "/dev/net/tun")?);
    wait_log(c, "split", "uses-tun", "tun-ok")?;

    // graft's DaemonSet rolls (a new pod UID, new sockets) while that pod runs: it keeps
    // its devices, and a new pod gets its own afterwards.
    roll_graft(c)?;
    ensure!(c.pod_phase("split") == "Running");
    // The new instances are ready and took the ports over: the new driver counts the
    // running pod's claim from the checkpoint it inherited.
    graft_ready(c)?;
    scrape_at_least(c, 9477, &[("graft_driver_prepared_claims", 1.0)])?;
    scrape_at_least(c, 9478, &[("graft_nri_synchronized", 1.0)])?;
    c.kubectl(&["delete", "pod", "split", "--wait=true"])?;
    c.apply(&fuse_pod("after-roll"))?;
    c.wait_phase("after-roll", "Running")?;
    wait_log(c, "after-roll", "app", "open-ok")?;
    c.kubectl(&["delete", "pod", "after-roll", "--wait=true"])?;
    wait_unprepared(c)?;

    // One claim shared by two pods: both run with the device; it is unprepared once the
    // last of them is gone.
    c.apply(&shared_claim_and_pods())?;
    c.wait_phase("share-a", "Running")?;
    c.wait_phase("share-b", "Running")?;
    wait_log(c, "share-a", "app", "open-ok")?;
    wait_log(c, "share-b", "app", "open-ok")?;
    c.kubectl(&["delete", "pod", "share-a", "share-b", "--wait=true"])?;
    c.kubectl(&["delete", "resourceclaim", "shared", "--wait=true"])?;
    wait_unprepared(c)?;

    // graft-nri alone down, graft-driver up. A new pod with a claim waits: the driver
    // refuses to prepare it. A running pod whose container is recreated waits too:
    // deploy/optional/ marks pods with claims as requiring graft, and containerd's NRI
    // validator refuses their containers while graft-nri is not connected. Once graft-nri is
    // back, both run with their devices.
    c.apply(&fuse_pod("nri-restart"))?;
    c.wait_phase("nri-restart", "Running")?;
    wait_log(c, "nri-restart", "app", "open-ok")?;
    let annotations = c.kubectl(&[
        "get",
        "pod",
        "nri-restart",
        "-o",
        "jsonpath={.metadata.annotations}",
    ])?;
    ensure!(
        annotations.contains("required-plugins.noderesource.dev/pod"),
        "the admission policy did not mark the pod: {annotations}"
    );
    {
        let _down = c.hold_down("graft-nri");
        c.apply(&device_pod("nri-away", "tun.graft.dev", "/dev/net/tun"))?;
        let app = c.container_id("nri-restart", "app")?;
        c.crictl(&["stop", "-t", "0", &app])?;
        let refused = |pod: &str, needle: &str| -> anyhow::Result<bool> {
            let events = c.kubectl(&[
                "get",
                "events",
                "--field-selector",
                &format!("involvedObject.name={pod}"),
                "-o",
                "jsonpath={.items[*].message}",
            ])?;
            Ok(events.contains(needle))
        };
        let start = Instant::now();
        // hold_down kills every process named graft-nri, graft's validator too, so NRI's
        // default validator names both as missing.
        while !(refused("nri-away", "graft-nri")?
            && refused("nri-restart", "\"graft,graft-validator\" not present")?)
        {
            ensure!(
                start.elapsed() < WAIT,
                "no refusal while graft-nri was down:\n{}",
                c.kubectl(&["describe", "pod", "nri-away", "nri-restart"])?
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        ensure!(c.pod_phase("nri-away") == "Pending");
        ensure!(
            !c.running("nri-restart", "app")?,
            "a container started without graft-nri"
        );
    }
    c.wait_phase("nri-away", "Running")?;
    wait_log(c, "nri-away", "app", "open-ok")?;
    wait_until(
        "nri-restart/app not recreated after graft-nri came back",
        || c.running("nri-restart", "app"),
    )?;
    let spec = c.runtime_spec("nri-restart", "app")?;
    ensure!(
        spec["annotations"]["graft.dev/injected"].is_string(),
        "{spec}"
    );
    wait_log(c, "nri-restart", "app", "open-ok")?;
    c.kubectl(&["delete", "pod", "nri-away", "nri-restart", "--wait=true"])?;
    wait_unprepared(c)?;

    // graft gone: the kubelet wipes its slices 30 s after the last driver instance left,
    // and a pod with a claim waits (nothing to allocate from, nobody to prepare or
    // inject). Once graft is back it republishes, and the pod runs with its device.
    c.kubectl(&[
        "-n",
        "graft-system",
        "delete",
        "daemonset",
        "graft",
        "--wait=true",
    ])?;
    c.apply(&fuse_pod("while-away"))?;
    let took = wait_until("the kubelet never wiped graft's slices", || {
        Ok(c.kubectl(&["get", "resourceslices", "-o", "name"])?
            .trim()
            .is_empty())
    })?;
    ensure!(took >= Duration::from_secs(20), "slices wiped too early");
    ensure!(c.pod_phase("while-away") == "Pending");
    c.deploy_graft()?;
    c.wait_phase("while-away", "Running")?;
    wait_log(c, "while-away", "app", "open-ok")?;

    // The kubelet and then containerd restart under that running pod: it keeps its device,
    // graft's slices come back after the kubelet's start-up wipe, and graft-nri reconnects,
    // so the next pod gets its device too.
    for component in ["kubelet", "containerd"] {
        c.restart(component)?;
        ensure!(
            c.pod_phase("while-away") == "Running",
            "pod lost after {component} restart"
        );
        let spec = c.runtime_spec("while-away", "app")?;
        ensure!(
            spec["annotations"]["graft.dev/injected"].is_string(),
            "{component}: {spec}"
        );
    }
    c.kubectl(&["delete", "pod", "while-away", "--wait=true"])?;
    wait_unprepared(c)?;
    c.apply(&fuse_pod("after-restarts"))?;
    c.wait_phase("after-restarts", "Running")?;
    wait_log(c, "after-restarts", "app", "open-ok")?;
    c.kubectl(&["delete", "pod", "after-restarts", "--wait=true"])?;
    wait_unprepared(c)?;

    events::graft_failures_show_in_describe(c)?;
    licences_one_per_pod(c)
}

/// The files backend as shipped (the chart's devicesToml, deploy/graft/40-configmap.yaml,
/// serves /var/lib/graft-files/licences, class licence.graft.dev): three licence files,
/// three pods, each with a different one, read-only; a fourth pod waits for a free file; a
/// symlink planted in the directory is never published.
fn licences_one_per_pod(c: &Cluster) -> anyhow::Result<()> {
    let dir = std::path::Path::new("/var/lib/graft-files/licences");
    let _ = std::fs::remove_dir_all(dir);
    // Created after graft started: the watch on its parent picks it up.
    std::fs::create_dir_all(dir)?;
    for n in 1..=3 {
        std::fs::write(dir.join(format!("seat-{n}")), format!("licence-{n}\n"))?;
    }
    std::os::unix::fs::symlink("/etc/shadow", dir.join("seat-evil"))?;
    let slices = || c.kubectl(&["get", "resourceslices", "-o", "json"]);
    wait_until("the licence files were never published", || {
        let s = slices()?;
        Ok(["seat-1", "seat-2", "seat-3"]
            .iter()
            .all(|n| s.contains(&format!("\"{n}\""))))
    })?;
    ensure!(!slices()?.contains("seat-evil"), "a symlink was published");

    let pod = |name: &str| {
        device_pod(name, "licence.graft.dev", "/run/graft/licence").replace(
            "stat -c '%n %t:%T %F' /run/graft/licence; dd if=/run/graft/licence of=/dev/null count=0 2>/dev/null && echo open-ok",
            "echo $LICENCE_FILE=`cat $LICENCE_FILE`; echo x >> $LICENCE_FILE 2>/dev/null || echo write-refused; echo DONE",
        )
    };
    let mut seen = Vec::new();
    for name in ["lic-a", "lic-b", "lic-c"] {
        c.apply(&pod(name))?;
        c.wait_phase(name, "Running")?;
        let log = wait_log(c, name, "app", "DONE")?;
        ensure!(
            log.contains("write-refused"),
            "{name} could write its licence:\n{log}"
        );
        let got = log
            .lines()
            .find_map(|l| l.strip_prefix("/run/graft/licence="))
            .with_context(|| format!("{name}: no licence in\n{log}"))?
            .to_string();
        ensure!(got.starts_with("licence-"), "{name}: {got}");
        ensure!(!seen.contains(&got), "{name} got {got} too");
        seen.push(got);
        let other = wait_log(c, name, "other", "licence")?;
        ensure!(other.contains("No such file"), "{name}/other: {other}");
    }
    c.apply(&pod("lic-d"))?;
    std::thread::sleep(Duration::from_secs(5));
    ensure!(
        c.pod_phase("lic-d") == "Pending",
        "a fourth pod ran with three licences"
    );
    c.kubectl(&["delete", "pod", "lic-b", "--wait=true"])?;
    c.wait_phase("lic-d", "Running")?;
    wait_log(c, "lic-d", "app", "licence-")?;
    c.kubectl(&["delete", "pod", "lic-a", "lic-c", "lic-d", "--wait=true"])?;
    wait_unprepared(c)?;
    for n in 1..=3 {
        ensure!(
            std::fs::read_to_string(dir.join(format!("seat-{n}")))? == format!("licence-{n}\n"),
            "seat-{n} changed"
        );
    }
    std::fs::remove_dir_all(dir)?;
    Ok(())
}

/// A claim named `shared` and two pods (`share-a`, `share-b`) that both use all of it.
fn shared_claim_and_pods() -> String {
    let mut out = String::from(
        r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared, namespace: default}
spec:
  devices:
    requests:
    - {name: dev, exactly: {deviceClassName: fuse.graft.dev}}
"#,
    );
    for name in ["share-a", "share-b"] {
        out.push_str(&format!(
            r#"---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  terminationGracePeriodSeconds: 1
  resourceClaims: [{{name: dev, resourceClaimName: shared}}]
  containers:
  - name: app
    image: docker.io/library/busybox:test
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "dd if=/dev/fuse of=/dev/null count=0 2>/dev/null && echo open-ok; sleep 3600"]
    resources: {{claims: [{{name: dev}}]}}
"#
        ));
    }
    out
}

const SPLIT_POD: &str = r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: split, namespace: default}
spec:
  spec:
    devices:
      requests:
      - {name: fuse, exactly: {deviceClassName: fuse.graft.dev}}
      - {name: tun, exactly: {deviceClassName: tun.graft.dev}}
---
apiVersion: v1
kind: Pod
metadata: {name: split, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  resourceClaims: [{name: devs, resourceClaimTemplateName: split}]
  initContainers:
  - name: init
    image: docker.io/library/busybox:test
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "test -c /dev/fuse && ! test -e /dev/net/tun"]
    resources: {claims: [{name: devs, request: fuse}]}
  containers:
  - name: uses-fuse
    image: docker.io/library/busybox:test
    imagePullPolicy: Never
    command: ["/bin/sleep", "3600"]
    resources: {claims: [{name: devs, request: fuse}]}
  - name: uses-tun
    image: docker.io/library/busybox:test
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "test -c /dev/net/tun && echo tun-ok; sleep 3600"]
    resources: {claims: [{name: devs, request: tun}]}
  - name: none
    image: docker.io/library/busybox:test
    imagePullPolicy: Never
    command: ["/bin/sleep", "3600"]
"#;
