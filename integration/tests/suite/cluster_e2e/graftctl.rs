//! graftctl in graft's pod, as an operator runs it: the first fuse pod's claim and device,
//! and what its container received.

use anyhow::{ensure, Context};
use graft_integration::cluster::Cluster;
use serde_json::Value;

/// `kubectl exec` graftctl in the graft-driver container.
fn graftctl(c: &Cluster, args: &[&str]) -> anyhow::Result<String> {
    let mut all = vec![
        "-n",
        "graft-system",
        "exec",
        "ds/graft",
        "-c",
        "graft-driver",
        "--",
        "graftctl",
    ];
    all.extend_from_slice(args);
    let out = c.kubectl(&all)?;
    // Tables only: the JSON is checked below and would bury a failure in CI's excerpt.
    if !args.contains(&"json") {
        println!("$ graftctl {}\n{out}", args.join(" "));
    }
    Ok(out)
}

/// Checks graftctl's view of `pod`'s container `app`, which holds the fuse device.
pub fn shows_fuse_pod(c: &Cluster, pod: &str) -> anyhow::Result<()> {
    let claim = format!("default/{pod}-dev-");
    let out = graftctl(c, &["devices"])?;
    ensure!(
        out.lines()
            .any(|l| l.contains("fuse.graft.dev") && l.contains("Healthy") && l.contains(&claim)),
        "graftctl devices shows no fuse device held by {claim}:\n{out}"
    );
    let out = graftctl(c, &["claims"])?;
    ensure!(
        out.lines().any(|l| l.contains(&claim)
            && l.contains(&format!("default/{pod}"))
            && l.contains("app")
            && l.contains("/dev/fuse")),
        "{out}"
    );
    let claims: Value = serde_json::from_str(&graftctl(c, &["claims", "-o", "json"])?)?;
    let uid = claims
        .as_array()
        .and_then(|a| {
            a.iter().find(|c| {
                c["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&format!("{pod}-dev-")))
            })
        })
        .and_then(|c| c["uid"].as_str())
        .context("no claim uid in graftctl claims -o json")?
        .to_string();
    let id = c.container_id(pod, "app")?;
    let out = graftctl(c, &["explain", &id[..13]])?;
    ensure!(
        out.contains(&id)
            && out.contains("/dev/fuse (c 10:229)")
            && out.contains(&format!("claims/{uid}.json"))
            && out.contains("[present]"),
        "{out}"
    );
    let v: Value = serde_json::from_str(&graftctl(c, &["explain", &id, "-o", "json"])?)?;
    ensure!(v["container"]["pod"]["name"] == pod, "{v}");
    let v: Value = serde_json::from_str(&graftctl(c, &["status", "-o", "json"])?)?;
    ensure!(v["nri"]["ready"] == true, "{v}");
    ensure!(v["driver"]["pid"].as_u64().is_some(), "{v}");
    Ok(())
}
