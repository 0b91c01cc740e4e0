//! graft-nri SIGKILLed while a burst of containers is being created, in a loop, against real
//! containerd 2.4 with NRI's default validator, graft's own validator (`graft-nri
//! --validate`) beside it, and pods marked as requiring both (what the chart's
//! `requireGraftNri` does). The kubelet's part is played here: a container whose create was
//! refused, or which stopped, is made again until the pod runs.
//!
//! Why graft's validator: containerd's NRI counts a plugin whose connection broke as having
//! answered the CreateContainer in flight with no changes, and its default validator counts
//! it as consulted, so without graft's validator one container per kill started without its
//! devices (20 of 20 rounds on containerd 2.4.2, whatever graft-nri did). graft's validator
//! sees the adjustment lacks graft-nri's edits and refuses the create; the kubelet retries
//! it once graft-nri is back. Some rounds kill the validator as well: a validation call that
//! breaks fails the create, and while the validator is away the default validator refuses
//! (the annotation names it), so those containers wait too.
//!
//! What must hold, every round: no container ever runs without its recorded device, and
//! every pod runs with it once graft-nri is back.
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
/// Bursts, each with graft-nri killed once at a different delay (`GRAFT_NRI_KILL_LOOPS`
/// overrides). Without graft's validator every burst showed the hole on containerd 2.4.2.
const LOOPS: usize = 50;
/// Every this many rounds, graft's validator is killed with graft-nri.
const BOTH_EVERY: usize = 5;
const DEV: &str = "/dev/graft-kill0";
const REQUIRED: (&str, &str) = (
    "required-plugins.noderesource.dev/pod",
    "[graft, graft-validator]",
);
/// How long the pods of one burst get to run with their devices once graft-nri is back.
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
async fn graft_nri_killed_during_bursts_never_starts_a_container_without_its_devices(
) -> anyhow::Result<()> {
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
    let mut validator = GraftNri::start(
        &cd.nri_socket,
        &state,
        &dir.join("logs/graft-validator.log"),
        &["--validate"],
    )?;
    validator.wait_log("configured by the runtime", Duration::from_secs(60))?;
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

    let mut failures = Vec::new();
    let started = Instant::now();
    for round in 0..loops {
        // Kill delays from 0 to ~60 ms, spread over the rounds.
        let delay = Duration::from_micros(((round * 7919) % 60_000) as u64);
        let both = round % BOTH_EVERY == BOTH_EVERY - 1;
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
        if both {
            validator.kill9()?;
        }
        let mut slots = Vec::new();
        for b in burst {
            slots.push(Slot {
                id: b.await.context("a create task failed")?,
                done: false,
            });
        }
        // Checked before anything restarts: what the burst let through while graft-nri
        // (and maybe the validator) was gone.
        let mut without = kubelet_pass(&cri, &cd, &pods, &mut slots, mm).await?;
        nri.spawn()?;
        if both {
            validator.spawn()?;
        }
        nri.wait_synchronized(Duration::from_secs(60))?;
        let start = Instant::now();
        loop {
            without.extend(kubelet_pass(&cri, &cd, &pods, &mut slots, mm).await?);
            if slots.iter().all(|s| s.done) || start.elapsed() > SETTLE {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        without.sort();
        without.dedup();
        if !without.is_empty() {
            failures.push(format!(
                "round {round} (kill after {delay:?}{}): containers running without their \
                 device: {without:?}",
                if both { ", validator killed too" } else { "" }
            ));
        }
        if slots.iter().any(|s| !s.done) {
            failures.push(format!(
                "round {round} (kill after {delay:?}): {} of {PODS} pods did not run with \
                 their device within {SETTLE:?} of graft-nri's return",
                slots.iter().filter(|s| !s.done).count()
            ));
        }
        for id in slots.iter().filter_map(|s| s.id.as_deref()) {
            cri.remove_container(id).await?;
        }
    }
    let refused = validator.log_text().matches("graft: refusing").count();
    println!(
        "{loops} bursts of {PODS} with graft-nri killed once each (and the validator too every \
         {BOTH_EVERY}th) in {:.0?}: {} rounds failed; graft's validator refused {refused} \
         creates",
        started.elapsed(),
        failures.len()
    );
    for pod in &pods {
        cri.remove_pod(pod).await?;
    }
    cd.teardown();
    ensure!(
        failures.is_empty(),
        "{}\ngraft-nri log tail:\n{}\nvalidator log tail:\n{}",
        failures.join("\n"),
        tail(&nri.log_text(), 40),
        tail(&validator.log_text(), 20)
    );
    Ok(())
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
