//! `kubectl describe` explains graft's failures: a claim whose prepare fails shows graft's
//! `PrepareFailed` Event, and a pod whose container graft-nri refuses shows
//! `DeviceInjectionRefused` naming the claim (besides the kubelet's own events, whose
//! runtime error text names the claim too).

use std::time::Instant;

use anyhow::{ensure, Context};
use graft_integration::cluster::workloads::wait_pod_claim;
use graft_integration::cluster::{Cluster, WAIT};

/// A claim template graft's prepare rejects: opaque configuration of a kind it does not know.
const BAD_CONFIG: &str = r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: bad-config, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: dev
        exactly: {deviceClassName: fuse.graft.dev}
      config:
      - requests: [dev]
        opaque:
          driver: graft.dev
          parameters: {apiVersion: graft.dev/v1alpha1, kind: NoSuchConfig}
"#;

/// Waits until `kubectl describe <what>` holds every needle; returns it.
fn describe_shows(c: &Cluster, what: &[&str], needles: &[&str]) -> anyhow::Result<String> {
    let start = Instant::now();
    let mut args = vec!["describe"];
    args.extend_from_slice(what);
    loop {
        let out = c.kubectl(&args)?;
        if needles.iter().all(|n| out.contains(n)) {
            return Ok(out);
        }
        ensure!(
            start.elapsed() < WAIT * 2,
            "describe {what:?} lacks {needles:?}:\n{out}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

pub fn graft_failures_show_in_describe(c: &Cluster) -> anyhow::Result<()> {
    // Prepare fails: the claim says why, from graft.
    c.apply(&(BAD_CONFIG.to_string() + &super::one_claim_pod("bad-config", "dev", "sleep 3600")))?;
    let claim = wait_pod_claim(c, "default", "bad-config")?;
    let out = describe_shows(
        c,
        &["resourceclaim", &claim],
        &["PrepareFailed", "graft-driver", "NoSuchConfig"],
    )?;
    println!("describe resourceclaim {claim}:\n{out}");
    ensure!(c.pod_phase("bad-config") == "Pending");
    c.kubectl(&["delete", "pod", "bad-config", "--wait=true"])?;
    c.kubectl(&["delete", "resourceclaimtemplate", "bad-config"])?;
    super::wait_unprepared(c)?;

    // graft-nri refuses a container: its claim's record is made to ask for a mount outside
    // the allowed roots, and the container is recreated.
    c.apply(&super::fuse_pod("refused"))?;
    c.wait_phase("refused", "Running")?;
    let claim = wait_pod_claim(c, "default", "refused")?;
    let uid = c.kubectl(&[
        "get",
        "resourceclaim",
        &claim,
        "-o",
        "jsonpath={.metadata.uid}",
    ])?;
    let path = std::path::PathBuf::from(format!("/var/lib/graft/claims/{}.json", uid.trim()));
    let original = std::fs::read(&path).with_context(|| format!("{}", path.display()))?;
    let mut rec: graft_record::ClaimRecord = serde_json::from_slice(&original)?;
    rec.devices[0].edits.mounts.push(graft_record::Mount {
        source: "/etc".into(),
        destination: "/host-etc".into(),
        kind: "bind".into(),
        options: ["rbind", "ro", "nosuid", "nodev"]
            .map(String::from)
            .to_vec(),
    });
    graft_record::atomic::write_file(&path, &serde_json::to_vec(&rec)?)?;
    let app = c.container_id("refused", "app")?;
    c.crictl(&["stop", "-t", "0", &app])?;
    let out = describe_shows(
        c,
        &["pod", "refused"],
        &[
            "DeviceInjectionRefused",
            &format!("default/{claim}"),
            "outside the allowed roots",
            // The kubelet's own event follows graft-nri's; waited for, not raced.
            "refusing to create container",
        ],
    );
    // Restored before anything else, so that the unprepare finds graft's own record.
    graft_record::atomic::write_file(&path, &original)?;
    let out = out?;
    println!("describe pod refused:\n{out}");
    // The kubelet's own event carries the runtime's error, which names the claim too.
    let failed = out
        .lines()
        .filter(|l| l.contains("refusing to create container"))
        .collect::<Vec<_>>();
    ensure!(
        failed.iter().any(|l| l.contains(&claim)),
        "the runtime's error does not name the claim:\n{out}"
    );
    c.kubectl(&["delete", "pod", "refused", "--wait=true"])?;
    super::wait_unprepared(c)
}
