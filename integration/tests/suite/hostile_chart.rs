//! The chart's admission policies against a hostile node and hostile tenants, on a real
//! kube-apiserver (the testbed's, started by `graft_integration::apiserver`; no cluster):
//!
//! - a compromised node's graft-driver (its service account, with the node name the API
//!   server puts in a pod-bound token's user info) writes only graft's ResourceSlices of its
//!   own node: not another driver's, not another node's, not one for all nodes;
//! - with ComputeDomains on, it only adds domain labels (`resource.graft.dev/computeDomain.
//!   <uid>=true`) to its own Node; with them off it patches no Node;
//! - with ComputeDomains on, graft-compute-domain-controller's ServiceAccount runs only IMEX
//!   daemon DaemonSets (the daemon's image and command, no privilege) and only changes domain
//!   labels of Nodes;
//! - its Events say they come from graft-driver on its own node, and are about a Pod, a
//!   ResourceClaim or its own Node; it patches only its own;
//! - `requireGraftNri` marks every pod that asks for devices, whatever annotation the pod
//!   brought, and pods that ask by extended resource;
//! - a tenant whose claim is refused because another namespace's claim holds its device is
//!   not told which claim that is (nor the host's paths), in the kubelet's answer or the
//!   claim's Event.
//!
//! Needs the testbed (`integration/testbed/setup.sh`) and, for the last, the workspace
//! binaries (`cargo build --workspace --bins`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use graft_integration::apiserver::{self, ControlPlane};
use graft_integration::Testbed;

mod controller;
mod events;
mod mps_tenancy;
mod nodes;
mod slices;
mod tenants;

const GRAFT_SA: &str = "system:serviceaccount:graft-system:graft";

/// This suite's API server: its admission policies are cluster-wide, so the other suites
/// of the test process do not share it.
fn control_plane() -> anyhow::Result<&'static ControlPlane> {
    apiserver::named("hostile_chart")
}

fn chart() -> PathBuf {
    graft_integration::testbed::chart_dir()
}

/// Writes `yaml` to a file of the control plane's and runs `kubectl <verb...> -f` it.
fn kubectl_file(
    cp: &ControlPlane,
    name: &str,
    yaml: &str,
    args: &[&str],
) -> anyhow::Result<String> {
    let path = cp.dir.join(name);
    std::fs::write(&path, yaml)?;
    let path = path.to_string_lossy().into_owned();
    let mut all = args.to_vec();
    all.extend(["-f", &path]);
    cp.kubectl(&all)
}

/// Applies `yaml` to the shared control plane. The tests of this binary run in parallel and
/// apply the same objects: two client-side `kubectl apply` that both find an object missing
/// both create it and one fails with AlreadyExists, so applies take turns.
fn install(cp: &ControlPlane, name: &str, yaml: &str) -> anyhow::Result<()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _ = cp.kubectl(&["create", "namespace", "graft-system"]);
    kubectl_file(cp, name, yaml, &["apply"]).map(drop)
}

/// The chart's RBAC and admission policies, rendered as shipped and applied.
fn install_policies(tb: &Testbed, cp: &ControlPlane) -> anyhow::Result<()> {
    let yaml = tb.render_chart(&[
        "--show-only",
        "templates/10-rbac.yaml",
        "--show-only",
        "templates/20-admission-policy.yaml",
    ])?;
    install(cp, "policies.yaml", &yaml)
}

/// `Ok` when `r` was refused by the admission policy named `policy`; `why` names the attempt.
pub(crate) fn refused_by(policy: &str, r: anyhow::Result<String>, why: &str) -> anyhow::Result<()> {
    match r {
        Ok(out) => bail!("accepted ({why}): {out}"),
        Err(e) => {
            let e = format!("{e:#}");
            ensure!(
                e.contains(&format!("ValidatingAdmissionPolicy '{policy}'")),
                "refused, but not by graft's policy ({why}): {e}"
            );
            Ok(())
        }
    }
}

/// Retries `attempt` until it says the policy acts (Ok(true)), for up to 60 s: policies and
/// bindings reach admission a moment after they are created.
fn until_active(mut attempt: impl FnMut() -> anyhow::Result<bool>) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        match attempt() {
            Ok(true) => return Ok(()),
            Ok(false) | Err(_) if start.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_millis(250))
            }
            Ok(false) => bail!("the policy did not take effect within 60 s"),
            Err(e) => return Err(e),
        }
    }
}

/// A client that is graft-driver's service account on `node`, as a pod-bound token makes it.
async fn node_client(cp: &ControlPlane, node: &str) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(&cp.kubeconfig)?;
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    cfg.auth_info.impersonate = Some(GRAFT_SA.into());
    cfg.auth_info.impersonate_user_extra = Some(
        [(
            "authentication.kubernetes.io/node-name".to_string(),
            vec![node.to_string()],
        )]
        .into(),
    );
    Ok(kube::Client::try_from(cfg)?)
}
