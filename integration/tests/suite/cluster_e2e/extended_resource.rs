//! Extended-resource mapping (DRAExtendedResource): a pod written for a device plugin asks
//! `resources.limits: {graft.dev/fuse: 1}` and has no resourceClaims; the scheduler makes
//! a claim for it from fuse.graft.dev's `extendedResourceName`, graft prepares it, and only
//! the container that asked gets the device.

use anyhow::{ensure, Context};
use graft_integration::cluster::Cluster;
use serde_json::Value;

const POD: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: by-limit, namespace: default}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: docker.io/library/busybox:test
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "dd if=/dev/fuse of=/dev/null count=0 2>/dev/null && echo open-ok; sleep 3600"]
    resources: {limits: {graft.dev/fuse: 1}}
  - name: other
    image: docker.io/library/busybox:test
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "test -e /dev/fuse && echo has-fuse || echo no-fuse; sleep 3600"]
"#;

pub fn fuse_by_limit(c: &Cluster) -> anyhow::Result<()> {
    c.apply(POD)?;
    c.wait_phase("by-limit", "Running")?;
    super::wait_log(c, "by-limit", "app", "open-ok")?;
    super::wait_log(c, "by-limit", "other", "no-fuse")?;
    let pod: Value = serde_json::from_str(&c.kubectl(&["get", "pod", "by-limit", "-o", "json"])?)?;
    let status = &pod["status"]["extendedResourceClaimStatus"];
    let claim = status["resourceClaimName"]
        .as_str()
        .with_context(|| format!("no extendedResourceClaimStatus: {}", pod["status"]))?;
    ensure!(
        status["requestMappings"][0]["containerName"] == "app",
        "{status}"
    );
    // requireGraftNri (on in the testbed) marked it, though it had no claim at admission.
    let marked = &pod["metadata"]["annotations"]["required-plugins.noderesource.dev/pod"];
    ensure!(
        marked == "[graft, graft-validator]",
        "not marked for graft-nri and its validator: {marked}"
    );
    let rc: Value =
        serde_json::from_str(&c.kubectl(&["get", "resourceclaim", claim, "-o", "json"])?)?;
    let results = &rc["status"]["allocation"]["devices"]["results"];
    ensure!(
        results[0]["driver"] == "graft.dev" && results[0]["device"] == "fuse",
        "{rc}"
    );
    println!(
        "by-limit: scheduler-made claim {claim}, request {}",
        results[0]["request"]
    );
    c.kubectl(&["delete", "pod", "by-limit", "--wait=true"])?;
    super::wait_unprepared(c)
}
