//! Who graft's pods run as, and where their API tokens are, as rendered with every workload
//! on (ComputeDomains, the scheduler extender, GPU mode with MPS): unprivileged pods run
//! as graft's own uid and gid (not nobody's 65534, not gid 0) without capabilities; no pod
//! gets the automounted token, and only containers that call the API server mount a
//! short-lived one that only their uid (and the pod's fsGroup) reads. Also the image
//! digest and the IMEX daemons' tolerations.

use anyhow::{ensure, Context};
use graft_integration::Testbed;
use serde_json::{json, Value};

use super::chart;
use super::pools::render;

/// Containers that call the API server; every other one must mount no token.
const API_CLIENTS: [&str; 3] = ["graft-driver", "controller", "extender"];

fn everything(tb: &Testbed) -> anyhow::Result<Vec<Value>> {
    let gpu = chart().join("values-gpu.yaml");
    render(
        tb,
        &[
            "-f",
            gpu.to_str().context("path")?,
            "--set",
            "nvidia.mps=all",
            "--set",
            "computeDomains.enabled=true",
            "--set",
            "schedulerExtender.enabled=true",
        ],
    )
}

/// The pod spec of each workload, by name.
fn pods(objs: &[Value]) -> Vec<(String, &Value)> {
    objs.iter()
        .filter(|o| ["DaemonSet", "Deployment"].contains(&o["kind"].as_str().unwrap_or("")))
        .map(|o| {
            let name = o["metadata"]["name"].as_str().unwrap_or("?").to_string();
            (name, &o["spec"]["template"]["spec"])
        })
        .collect()
}

#[test]
fn graft_pods_run_as_their_own_ids_and_mount_tokens_only_where_used() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let objs = everything(&tb)?;
    let pods = pods(&objs);
    for want in [
        "graft",
        "graft-gpu",
        "graft-mps",
        "graft-compute-domain-controller",
        "graft-scheduler-extender",
    ] {
        ensure!(pods.iter().any(|(n, _)| n == want), "{want} not rendered");
    }
    let mut unprivileged = 0;
    for (name, pod) in &pods {
        ensure!(
            pod["automountServiceAccountToken"] == false,
            "{name}: the service account token is automounted"
        );
        let psc = &pod["securityContext"];
        ensure!(
            psc.get("supplementalGroups").is_none(),
            "{name}: supplemental groups"
        );
        let token_volumes: Vec<&Value> = pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| {
                v["projected"]["sources"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|s| s.get("serviceAccountToken").is_some()))
            })
            .collect();
        for v in &token_volumes {
            let mode = v["projected"]["defaultMode"].as_u64().unwrap_or(0o644);
            ensure!(mode & 0o007 == 0, "{name}: token volume mode {mode:o}");
            for s in v["projected"]["sources"].as_array().into_iter().flatten() {
                if let Some(t) = s.get("serviceAccountToken") {
                    let secs = t["expirationSeconds"].as_u64().unwrap_or(u64::MAX);
                    ensure!(secs <= 3600, "{name}: a token living {secs} s");
                }
            }
        }
        let token_names: Vec<&str> = token_volumes
            .iter()
            .filter_map(|v| v["name"].as_str())
            .collect();
        for c in pod["containers"].as_array().into_iter().flatten() {
            let cname = c["name"].as_str().unwrap_or("?");
            let mounts = c["volumeMounts"].as_array().into_iter().flatten();
            let tokens = mounts
                .filter(|m| token_names.contains(&m["name"].as_str().unwrap_or("")))
                .count();
            let client = API_CLIENTS.contains(&cname);
            ensure!(
                tokens == usize::from(client),
                "{name}/{cname}: {tokens} token mounts (API client: {client})"
            );
            let csc = &c["securityContext"];
            let uid = csc["runAsUser"].as_i64().or(psc["runAsUser"].as_i64());
            if uid == Some(0) {
                continue;
            }
            // Not root: graft's own ids, never nobody's or root's group.
            unprivileged += 1;
            let gid = csc["runAsGroup"].as_i64().or(psc["runAsGroup"].as_i64());
            ensure!(
                uid.is_some_and(|u| u != 65534) && gid.is_some_and(|g| g != 0 && g != 65534),
                "{name}/{cname} runs as {uid:?}:{gid:?}"
            );
            ensure!(
                psc["runAsNonRoot"] == true && psc["fsGroup"].as_i64() == gid,
                "{name}: {psc}"
            );
            ensure!(
                psc["seccompProfile"]["type"] == "RuntimeDefault"
                    && csc["allowPrivilegeEscalation"] == false
                    && csc["readOnlyRootFilesystem"] == true
                    && csc["capabilities"]["drop"] == json!(["ALL"])
                    && csc.get("privileged").is_none(),
                "{name}/{cname}: {csc}"
            );
        }
    }
    ensure!(
        unprivileged == 2,
        "{unprivileged} unprivileged containers, not 2"
    );

    // Nobody's and root's ids are refused.
    for bad in [
        "podSecurity.runAsUser=65534",
        "podSecurity.runAsUser=0",
        "podSecurity.runAsGroup=0",
        "podSecurity.runAsGroup=65534",
        "apiTokenSeconds=86401",
    ] {
        ensure!(tb.render_chart(&["--set", bad]).is_err(), "{bad} accepted");
    }
    Ok(())
}

#[test]
fn image_digest_and_imex_tolerations_reach_the_pods() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let digest = format!("sha256:{}", "ab".repeat(32));
    let on = render(
        &tb,
        &[
            "--set",
            &format!("image.digest={digest}"),
            "--set",
            "computeDomains.enabled=true",
        ],
    )?;
    let images: Vec<&str> = pods(&on)
        .iter()
        .flat_map(|(_, p)| p["containers"].as_array().into_iter().flatten())
        .filter_map(|c| c["image"].as_str())
        .collect();
    let want = format!("ghcr.io/graft-dev/graft:v0.1.0@{digest}");
    ensure!(
        !images.is_empty() && images.iter().all(|i| *i == want),
        "{images:?}"
    );
    let controller = pods(&on)
        .into_iter()
        .find(|(n, _)| n == "graft-compute-domain-controller")
        .context("no controller")?
        .1;
    let env = |name: &str| {
        controller["containers"][0]["env"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str())
            .map(str::to_string)
    };
    ensure!(env("GRAFT_IMEX_IMAGE").as_deref() == Some(want.as_str()));
    let tolerations: Value =
        serde_json::from_str(&env("GRAFT_IMEX_TOLERATIONS").context("no tolerations")?)?;
    ensure!(
        tolerations
            == json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
        "{tolerations}"
    );
    ensure!(tb.render_chart(&["--set", "image.digest=latest"]).is_err());
    Ok(())
}
