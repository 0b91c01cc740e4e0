//! graft's pods against an unprivileged process on their node, on the testbed cluster with
//! the chart installed as shipped (the GPU bed of `graft_integration::cluster::gpu`, with
//! ComputeDomains and the scheduler extender on): node agents such as node-exporter run as
//! uid 65534 with the host's PIDs in view, so a pod running as 65534:0 with every
//! capability dropped, and one as 65534:65534, try what such a process could do to graft.
//! A victim pod set up as graft's unprivileged pods once were (65534:0, a mounted token)
//! shows the attacks work on this node. Then graft-compute-domain-controller's
//! ServiceAccount, as a stolen token would use it, tries to run a DaemonSet of its own in
//! graft's namespace and to change Nodes.
//!
//! Needs root, the testbed and the workspace binaries, as cluster_e2e does.

use anyhow::{ensure, Context};
use graft_integration::cluster::gpu::{with_bed, GpuValues, FAKE_DIR};
use graft_integration::cluster::workloads::{logs_in, wait_running, BUSYBOX};
use graft_integration::cluster::{wait_until, Cluster};

pub(crate) mod controller;

const NS: &str = "graft-system";
const NODE: &str = "graft-node";
/// The processes of graft's pods, by their `comm` (the kernel keeps 15 bytes of the name).
const GRAFT_COMMS: [&str; 4] = [
    "graft-driver",
    "graft-nri",
    "graft-compute-d",
    "graft-scheduler",
];
/// Where a pod's token is, seen through /proc/<pid>/root (/var/run may be a link to /run).
const TOKEN_PATHS: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/token /run/secrets/kubernetes.io/serviceaccount/token";

/// The pids of graft's processes on the node: its pods' (cgroup below `kubepods`), not the
/// graft-nri other suites run on the host.
fn graft_pids() -> anyhow::Result<Vec<(i32, String)>> {
    let mut out = Vec::new();
    for p in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(p.path().join("comm")).unwrap_or_default();
        let comm = comm.trim_end();
        let cgroup = std::fs::read_to_string(p.path().join("cgroup")).unwrap_or_default();
        if GRAFT_COMMS.contains(&comm) && cgroup.contains("kubepods") {
            out.push((pid, comm.to_string()));
        }
    }
    Ok(out)
}

/// The pid of the victim pod's `sleep`.
fn victim_pid(c: &Cluster) -> anyhow::Result<i32> {
    let id = c.container_id("victim", "victim")?;
    let v: serde_json::Value = serde_json::from_str(&c.crictl(&["inspect", &id])?)?;
    v["info"]["pid"]
        .as_i64()
        .and_then(|p| i32::try_from(p).ok())
        .context("the victim's pid")
}

/// The attacker: two containers with the host's PIDs, no capabilities. `reader` (65534:0)
/// reads each pid's token through /proc/<pid>/root, and its own as a check that the path
/// works; `signaller` (65534:65534) sends each pid signal 0.
fn attacker(pids: &str) -> String {
    let read = format!(
        "for p in {pids} self; do r=denied; for t in {TOKEN_PATHS}; do \
         if [ -s /proc/$p/root$t ] && cat /proc/$p/root$t >/dev/null 2>&1; then r=read; fi; done; \
         echo \"token $p $r\"; done; echo finished; sleep 3600"
    );
    let signal = format!(
        "for p in {pids}; do if e=$(kill -0 $p 2>&1); then echo \"signal $p sent\"; \
         else echo \"signal $p refused: $e\"; fi; done; echo finished; sleep 3600"
    );
    let sc = |gid: u32| {
        format!(
            "{{runAsUser: 65534, runAsGroup: {gid}, allowPrivilegeEscalation: false, \
             capabilities: {{drop: [ALL]}}}}"
        )
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: attacker, namespace: default}}\nspec:\n\
         \x20 hostPID: true\n  restartPolicy: Never\n  containers:\n\
         \x20 - name: reader\n    image: {BUSYBOX}\n    command: [sh, -c, {read:?}]\n\
         \x20   securityContext: {}\n\
         \x20 - name: signaller\n    image: {BUSYBOX}\n    command: [sh, -c, {signal:?}]\n\
         \x20   securityContext: {}\n",
        sc(0),
        sc(65534)
    )
}

/// A pod as graft-compute-domain-controller and graft-scheduler-extender were: 65534 with
/// the image's gid 0, a token mounted.
fn victim() -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: victim, namespace: default}}\nspec:\n\
         \x20 containers:\n  - name: victim\n    image: {BUSYBOX}\n    command: [sleep, \"3600\"]\n\
         \x20   securityContext: {{runAsUser: 65534, runAsGroup: 0, allowPrivilegeEscalation: false, \
         capabilities: {{drop: [ALL]}}}}\n"
    )
}

/// The attacker's log lines once it has finished.
fn finished(c: &Cluster, container: &str) -> anyhow::Result<String> {
    let mut log = String::new();
    wait_until(
        &format!("the attacker's {container} never finished"),
        || {
            log = logs_in(c, "default", "attacker", container);
            Ok(log.contains("finished"))
        },
    )?;
    Ok(log)
}

#[test]
fn graft_pods_keep_their_tokens() -> anyhow::Result<()> {
    with_bed(|bed| {
        let values = GpuValues {
            helm: [
                "computeDomains.enabled=true",
                "schedulerExtender.enabled=true",
            ]
            .into_iter()
            .flat_map(|v| ["--set".to_string(), v.to_string()])
            .collect(),
            ..Default::default()
        };
        // The extender runs where kube-scheduler does: the control plane's nodes.
        bed.cluster.kubectl(&[
            "label",
            "node",
            NODE,
            "node-role.kubernetes.io/control-plane=",
            "--overwrite",
        ])?;
        bed.fresh(&values, |_| Ok(()))?;
        let c = &bed.cluster;
        // The testbed's pod network does not reach the API server (multi::domains does the
        // same): the controller goes on the host's network, as the extender is.
        let pin = r#"{"spec":{"template":{"spec":{"hostNetwork":true,"dnsPolicy":"ClusterFirstWithHostNet"}}}}"#;
        c.kubectl(&[
            "-n",
            NS,
            "patch",
            "deployment/graft-compute-domain-controller",
            "--type=merge",
            "-p",
            pin,
        ])?;
        for w in [
            "deployment/graft-compute-domain-controller",
            "daemonset/graft-scheduler-extender",
        ] {
            c.kubectl(&["-n", NS, "rollout", "status", w, "--timeout=120s"])?;
        }
        let r = attack(c);
        let _ = c.kubectl(&[
            "label",
            "node",
            NODE,
            "node-role.kubernetes.io/control-plane-",
        ]);
        r
    })
}

fn attack(c: &Cluster) -> anyhow::Result<()> {
    c.apply(&victim())?;
    wait_running(c, "default", "victim")?;
    let mut pids = Vec::new();
    wait_until("not every graft process is up", || {
        pids = graft_pids()?;
        Ok(GRAFT_COMMS
            .iter()
            .all(|comm| pids.iter().any(|(_, c)| c == comm)))
    })?;
    let victim = victim_pid(c)?;
    let list: String = pids
        .iter()
        .map(|(p, _)| p.to_string())
        .chain([victim.to_string()])
        .collect::<Vec<_>>()
        .join(" ");
    c.apply(&attacker(&list))?;
    wait_running(c, "default", "attacker")?;

    let reads = finished(c, "reader")?;
    let signals = finished(c, "signaller")?;
    eprintln!("reader:\n{reads}signaller:\n{signals}");
    // The attacks work here: its own token and the victim's are read, the victim signalled.
    for (line, what) in [
        ("token self read".to_string(), "its own token"),
        (format!("token {victim} read"), "the victim's token"),
        (format!("signal {victim} sent"), "a signal to the victim"),
    ] {
        ensure!(
            reads.contains(&line) || signals.contains(&line),
            "the attack does not work on this node ({what}):\n{reads}{signals}"
        );
    }
    let mut held = Vec::new();
    // Probes start short-lived processes of the same names: only those still there count.
    let alive = graft_pids()?;
    let pids: Vec<_> = pids.into_iter().filter(|p| alive.contains(p)).collect();
    ensure!(
        GRAFT_COMMS
            .iter()
            .all(|comm| pids.iter().any(|(_, c)| c == comm)),
        "graft's processes changed during the attack: {alive:?}"
    );
    for (pid, comm) in &pids {
        if !reads.contains(&format!("token {pid} denied")) {
            held.push(format!("{comm} ({pid}): token read"));
        }
        if !signals.contains(&format!("signal {pid} refused: ")) {
            held.push(format!("{comm} ({pid}): signalled"));
        } else {
            let line = signals
                .lines()
                .find(|l| l.starts_with(&format!("signal {pid} refused")))
                .unwrap_or_default();
            // EPERM, not a process that is gone (ESRCH).
            ensure!(line.contains("not permitted"), "{comm} ({pid}): {line}");
        }
    }
    ensure!(
        held.is_empty(),
        "a 65534 process got at graft's pods: {held:?}"
    );
    eprintln!(
        "{} graft processes: 0 tokens read from 65534:0, 0 signalled from 65534:65534",
        pids.len()
    );
    let n = controller::is_held(&controller::Target {
        kubectl: &|args| c.kubectl(args),
        image: "localhost/graft:testbed",
        driver_root: &format!("{FAKE_DIR}/host"),
        node: NODE,
        graft_daemonset: "graft-gpu",
    })?;
    eprintln!("{n} attacks with the controller's ServiceAccount, 0 accepted");
    Ok(())
}
