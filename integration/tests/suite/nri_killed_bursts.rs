//! graft-nri SIGKILLed while a burst of containers is being created, in a loop, against real
//! containerd 2.4 with NRI's default validator and pods marked as requiring graft (what the
//! chart's `requireGraftNri` does). The kubelet's part is played here: a container whose
//! create was refused, or which stopped, is made again until the pod runs.
//!
//! What it shows (every round, on containerd 2.4.2): containerd's NRI counts a plugin whose
//! connection broke as having answered the next CreateContainer with no changes, and its
//! validator counts it as present, so one container per kill starts without graft's edits,
//! whatever graft-nri does. Neither 2.2 nor 2.4 acts on a plugin's evictions, so graft-nri
//! cannot stop it either. What must hold, and does: once graft-nri is back, every other
//! pod runs its container with its recorded device, and each container running without it
//! is found and named by graft-nri (log, status file, metric) for an operator to restart.
//!
//! Needs the testbed and the workspace binaries, as nri_containerd does.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use graft_integration::cri::Pod;
use graft_integration::mounts::Scratch;
use graft_integration::records::{char_node, one_device_claim};
use graft_integration::{Containerd, Cri, GraftNri, Testbed, Version};
use graft_record::{ContainerEdits, RecordStore};
use k8s_cri::v1::ContainerState;
use nix::sys::stat::{major, minor};
use std::os::unix::fs::MetadataExt;

/// Pods per burst: the count that showed the hole on the cluster.
const PODS: usize = 12;
/// Bursts, each with graft-nri killed once (`GRAFT_NRI_KILL_LOOPS` overrides). Every burst
/// showed the hole on containerd 2.4.2 (20 of 20), and each takes about a minute, so a few do.
const LOOPS: usize = 4;
const DEV: &str = "/dev/graft-kill0";
const REQUIRED: (&str, &str) = ("required-plugins.noderesource.dev/pod", "[graft]");
/// How long the pods of one burst get to run with their devices (or be reported) once
/// graft-nri is back.
const SETTLE: Duration = Duration::from_secs(30);

fn host_device() -> anyhow::Result<(i64, i64)> {
    for p in ["/dev/cpu_dma_latency", "/dev/hwrng"] {
        if let Ok(md) = std::fs::metadata(p) {
            return Ok((major(md.rdev()) as i64, minor(md.rdev()) as i64));
        }
    }
    bail!("no suitable test character device (/dev/cpu_dma_latency) on this machine")
}

/// Whether container `id`'s spec holds the recorded device.
fn has_device(cd: &Containerd, id: &str, mm: (i64, i64)) -> anyhow::Result<bool> {
    let spec = cd.oci_spec(id)?;
    Ok(spec
        .linux()
        .as_ref()
        .and_then(|l| l.devices().as_ref())
        .is_some_and(|ds| {
            ds.iter()
                .any(|d| d.path().to_str() == Some(DEV) && (d.major(), d.minor()) == mm)
        }))
}

/// What one pod's container is doing, as the kubelet would track it.
#[derive(Default)]
struct Slot {
    id: Option<String>,
    done: bool,
}

/// One pass of the kubelet's loop over the pods: a pod without a container gets one made
/// and started; a container that exited or never started is removed to be made again; a
/// running one is checked for its device. Returns the ids seen running without it.
async fn kubelet_pass(
    cri: &Cri,
    cd: &Containerd,
    pods: &[Pod],
    slots: &mut [Slot],
    mm: (i64, i64),
) -> anyhow::Result<Vec<String>> {
    let mut without = Vec::new();
    for (pod, slot) in pods.iter().zip(slots.iter_mut()) {
        if slot.done {
            continue;
        }
        match slot.id.clone() {
            None => {
                if let Ok(id) = cri.create(pod, "app", "exec sleep 3600").await {
                    // A refused start leaves it created; the next pass removes it.
                    let _ = cri.start(&id).await;
                    slot.id = Some(id);
                }
            }
            Some(id) => match cri.state(&id).await? {
                ContainerState::ContainerRunning => {
                    if has_device(cd, &id, mm)? {
                        slot.done = true;
                    } else {
                        without.push(id);
                    }
                }
                ContainerState::ContainerCreated | ContainerState::ContainerExited => {
                    cri.remove_container(&id).await?;
                    slot.id = None;
                }
                other => bail!("container {id} of pod {} is {other:?}", pod.name),
            },
        }
    }
    Ok(without)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graft_nri_killed_during_bursts_reports_every_container_it_missed() -> anyhow::Result<()> {
    let loops = std::env::var("GRAFT_NRI_KILL_LOOPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(LOOPS);
    let tb = Testbed::load()?;
    let dir = Scratch::new(format!("/tmp/graft-kill-{}", std::process::id()))?;
    let mut cd = Containerd::start(&tb, Version::V2_4, &dir)?;
    let state = dir.join("graft-state");
    let store = RecordStore::open(&state)?;
    let mut nri = GraftNri::start(
        &cd.nri_socket,
        &state,
        &dir.join("logs/graft-nri.log"),
        &["--eviction-grace-ms", "1000"],
    )?;
    nri.wait_synchronized(Duration::from_secs(60))?;
    let cri = Cri::connect(&cd.socket, &dir.join("pods")).await?;
    let mm = host_device()?;

    let mut pods = Vec::new();
    for i in 0..PODS {
        let uid = format!("kill-pod-{i}-{}", std::process::id());
        let edits = ContainerEdits {
            device_nodes: vec![char_node(DEV, mm.0, mm.1, 0o600)],
            ..Default::default()
        };
        let claim_uid = format!("kill-claim-{i}-{}", std::process::id());
        store.put_claim(&one_device_claim(
            &claim_uid,
            &format!("claim-{i}"),
            &uid,
            &["app"],
            "testdev-0",
            edits,
        ))?;
        pods.push(
            cri.run_pod_annotated(&format!("kill-{i}"), &uid, &[REQUIRED])
                .await?,
        );
    }

    let (mut missed, mut failures) = (0usize, Vec::new());
    for round in 0..loops {
        // Kill delays from 0 to ~60 ms, spread over the rounds.
        let delay = Duration::from_micros(((round * 7919) % 60_000) as u64);
        let burst: Vec<_> = pods
            .iter()
            .map(|pod| {
                let (cri, pod) = (cri.clone(), pod.clone());
                tokio::spawn(async move {
                    let id = cri.create(&pod, "app", "exec sleep 3600").await.ok()?;
                    let _ = cri.start(&id).await;
                    Some(id)
                })
            })
            .collect();
        tokio::time::sleep(delay).await;
        nri.kill9()?;
        let mut slots = Vec::new();
        for b in burst {
            slots.push(Slot {
                id: b.await.context("a create task failed")?,
                done: false,
            });
        }
        nri.spawn()?;
        nri.wait_synchronized(Duration::from_secs(60))?;
        let start = Instant::now();
        let mut unreported: Vec<String>;
        loop {
            let without = kubelet_pass(&cri, &cd, &pods, &mut slots, mm).await?;
            // A container running without its device ends its pod's part once graft-nri
            // has named it (it cannot be stopped through NRI).
            let log = nri.log_text();
            unreported = without
                .iter()
                .filter(|id| !log.contains(&format!("container={id}")))
                .cloned()
                .collect();
            for slot in slots.iter_mut().filter(|s| !s.done) {
                if slot
                    .id
                    .as_ref()
                    .is_some_and(|id| without.contains(id) && !unreported.contains(id))
                {
                    slot.done = true;
                    missed += 1;
                }
            }
            if slots.iter().all(|s| s.done) || start.elapsed() > SETTLE {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if slots.iter().any(|s| !s.done) {
            failures.push(format!(
                "round {round} (kill after {delay:?}): {} of {PODS} pods neither run with their \
                 device nor were reported after {SETTLE:?}; running without it, unreported: \
                 {unreported:?}",
                slots.iter().filter(|s| !s.done).count()
            ));
        }
        for id in slots.iter().filter_map(|s| s.id.as_deref()) {
            cri.remove_container(id).await?;
        }
    }
    println!(
        "{loops} bursts of {PODS} with graft-nri killed once each: {missed} containers \
         started without their device (containerd let them through) and were reported; \
         {} rounds failed",
        failures.len()
    );
    for pod in &pods {
        cri.remove_pod(pod).await?;
    }
    cd.teardown();
    ensure!(
        failures.is_empty(),
        "{}\ngraft-nri log tail:\n{}",
        failures.join("\n"),
        tail(&nri.log_text(), 40)
    );
    Ok(())
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
