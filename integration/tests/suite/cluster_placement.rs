//! graft-scheduler-extender with the real kube-scheduler, on the two-node testbed with a
//! fake GPU node each: kube-scheduler configured as docs/placement.md says
//! (cluster.sh's GRAFT_SCHEDULER_EXTENDER: `ignorable`, a 2 s timeout), the extender from
//! the chart (`schedulerExtender.enabled`, its defaults otherwise: HTTPS, kube-scheduler
//! trusting graft's CA alone and presenting its client certificate, here from a Secret the
//! test makes, since kube-scheduler's configuration is written before the chart runs) on the
//! first node, which shares the host's network with kube-scheduler and is labelled as the
//! control plane. Needs root, the testbed and the workspace binaries, as the
//! other cluster tests do; takes its turn through the GPU bed's lock.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_integration::cluster::gpu::GpuValues;
use graft_integration::cluster::multi::{MultiCluster, EXTENDER, EXTENDER_METRICS};
use graft_integration::cluster::workloads::{gpus_template, one_claim_pod, one_claim_pod_on};
use graft_integration::cluster::{wait_until, Cluster};
use graft_integration::extender_pki::ExtenderPki;
use graft_integration::scrape;

/// A pod `name` whose container gets `count` whole GPUs, on `node` when given.
fn gpu_pod(name: &str, count: u32, node: Option<&str>) -> String {
    let pod = match node {
        Some(n) => one_claim_pod_on(name, "gpus", "sleep 3600", n),
        None => one_claim_pod(name, "gpus", "sleep 3600"),
    };
    gpus_template(name, count, false) + &pod
}

fn node_of(c: &Cluster, pod: &str) -> anyhow::Result<String> {
    c.kubectl(&["get", "pod", pod, "-o", "jsonpath={.spec.nodeName}"])
}

/// The extender's `prioritize` calls by outcome, for a failure's message.
fn outcomes() -> String {
    scrape::tcp_get(EXTENDER_METRICS, "/metrics")
        .map(|(_, text)| {
            text.lines()
                .filter(|l| {
                    l.starts_with("graft_scheduler_extender_calls_total{verb=\"prioritize\"")
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_else(|e| format!("metrics unreadable: {e:#}"))
}

/// Runs `pod` and says how long it took to be Running.
fn runs(c: &Cluster, name: &str, yaml: &str) -> anyhow::Result<Duration> {
    let start = Instant::now();
    c.apply(yaml)?;
    c.wait_phase(name, "Running")?;
    Ok(start.elapsed())
}

/// The extender's count of `prioritize` calls that scored a GPU pod.
fn scored() -> f64 {
    scrape::tcp_get(EXTENDER_METRICS, "/metrics")
        .ok()
        .and_then(|(_, text)| {
            scrape::value(
                &text,
                "graft_scheduler_extender_calls_total{verb=\"prioritize\",outcome=\"scored\"}",
            )
        })
        .unwrap_or(0.0)
}

/// With the extender up, a one-GPU pod goes where four of eight GPUs are already taken (it
/// packs); then the extender is taken away, and then replaced by a listener that accepts
/// and never answers: each time a GPU pod is still scheduled and runs.
#[test]
fn extender_down_does_not_block_scheduling() -> anyhow::Result<()> {
    let _turn = graft_integration::cluster::gpu::own_cluster();
    // Outlives the cluster: kube-scheduler reads its files whenever it starts.
    let certs = tempfile::tempdir()?;
    let pki = ExtenderPki::create(certs.path())?;
    let mc =
        MultiCluster::up_with_tls(2, Some(&format!("https://{EXTENDER}/")), Some(certs.path()))?;
    let c = &mc.cluster;
    mc.label_control_plane()?;
    let _ = c.kubectl(&["create", "namespace", "graft-system"]);
    let from = |k: &str| format!("--from-file={k}={}", pki.file(k).display());
    c.kubectl(&[
        "-n",
        "graft-system",
        "create",
        "secret",
        "generic",
        "graft-extender-test-tls",
        &from("ca.crt"),
        &from("tls.crt"),
        &from("tls.key"),
    ])?;
    let values = GpuValues {
        helm: vec![
            "--set".into(),
            "schedulerExtender.enabled=true".into(),
            "--set".into(),
            "schedulerExtender.tls.secretName=graft-extender-test-tls".into(),
        ],
        ..Default::default()
    };
    mc.deploy_gpu_with(&[None, None], &values)?;
    mc.wait_extender()?;
    let second = mc.nodes[1].clone();

    // Half of the second node's GPUs taken: packing puts the next pod there.
    runs(c, "hold", &gpu_pod("hold", 4, Some(&second)))?;
    let before = scored();
    // Held by a scheduling gate until its claim exists and has had time to reach the
    // extender's own watch: under load that watch can trail kube-scheduler's, and a pod
    // asked about before the extender knows its claim is scored as asking for nothing.
    let gated = gpu_pod("packed", 1, None).replace(
        "spec:\n  terminationGracePeriodSeconds: 1",
        "spec:\n  schedulingGates: [{name: graft.dev/test-hold}]\n  terminationGracePeriodSeconds: 1",
    );
    ensure!(gated.contains("schedulingGates"), "{gated}");
    let start = Instant::now();
    c.apply(&gated)?;
    wait_until("the gated pod's claim was never made", || {
        Ok(!c
            .kubectl(&[
                "get",
                "pod",
                "packed",
                "-o",
                "jsonpath={.status.resourceClaimStatuses[*].resourceClaimName}",
            ])?
            .trim()
            .is_empty())
    })?;
    std::thread::sleep(Duration::from_secs(3));
    c.kubectl(&[
        "patch",
        "pod",
        "packed",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/schedulingGates"}]"#,
    ])?;
    c.wait_phase("packed", "Running")?;
    let took = start.elapsed();
    ensure!(
        scored() > before,
        "kube-scheduler never had the extender score a GPU pod (calls: {})",
        outcomes()
    );
    let node = node_of(c, "packed")?;
    ensure!(
        node == second,
        "the extender packs, but the pod went to {node}, not {second}"
    );
    eprintln!("extender up: GPU pod Running in {took:?}");
    wait_until("no GpuNodesScored Event on the scored pod", || {
        Ok(c.kubectl(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=packed,reason=GpuNodesScored",
            "-o",
            "jsonpath={.items[*].message}",
        ])?
        .contains(&format!("1 whole GPU: preferred {second}")))
    })?;

    // Extender gone (connection refused): scheduling goes on.
    c.kubectl(&[
        "-n",
        "graft-system",
        "patch",
        "daemonset",
        "graft-scheduler-extender",
        "--type=merge",
        "-p",
        r#"{"spec":{"template":{"spec":{"nodeSelector":{"graft.dev/nowhere":"true"}}}}}"#,
    ])?;
    wait_until("the extender's pod is still there", || {
        Ok(c.kubectl(&[
            "-n",
            "graft-system",
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=graft-scheduler-extender",
            "-o",
            "name",
        ])?
        .trim()
        .is_empty())
    })?;
    let took = runs(c, "refused", &gpu_pod("refused", 1, None))?;
    eprintln!("extender down: GPU pod Running in {took:?}");

    // An extender that accepts and never answers: kube-scheduler waits its timeout (2 s)
    // and goes on without it.
    let hung = wait_until("the extender's address stayed taken", || {
        Ok(TcpListener::bind(EXTENDER).is_ok())
    })
    .and_then(|_| TcpListener::bind(EXTENDER).context("binding the hung extender"))?;
    hung.set_nonblocking(true)?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let holder = {
        let stop = stop.clone();
        // Accepts every connection and holds it unanswered until told to stop.
        std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match hung.accept() {
                    Ok((s, _)) => held.push(s),
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
            held.len()
        })
    };
    let took = runs(c, "hung", &gpu_pod("hung", 1, None))?;
    eprintln!("extender hung: GPU pod Running in {took:?}");
    ensure!(
        took < Duration::from_secs(60),
        "a hung extender held scheduling for {took:?}"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let calls = holder
        .join()
        .map_err(|_| anyhow::anyhow!("the hung extender panicked"))?;
    ensure!(calls > 0, "kube-scheduler never called the hung extender");
    let left = mc.down()?;
    ensure!(left.is_empty(), "the testbed left {left:?}");
    Ok(())
}
