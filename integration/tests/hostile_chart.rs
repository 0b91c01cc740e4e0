//! The chart's admission policies against a hostile node and hostile tenants, on a real
//! kube-apiserver (the testbed's, started by `graft_integration::apiserver`; no cluster):
//!
//! - a compromised node's graft-driver (its service account, with the node name the API
//!   server puts in a pod-bound token's user info) writes only graft's ResourceSlices of its
//!   own node: not another driver's, not another node's, not one for all nodes;
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

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use graft_integration::apiserver::{self, ControlPlane};
use graft_integration::claims::{claim_with_pod, namespace, uid};
use graft_integration::dra_node::{prepare, DraNode};
use graft_integration::Testbed;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};

const GRAFT_SA: &str = "system:serviceaccount:graft-system:graft";

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/helm/graft")
}

/// `helm template` of the chart with these arguments.
fn render(tb: &Testbed, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(&tb.helm)
        .args(["template", "graft"])
        .arg(chart())
        .args(["--namespace", "graft-system"])
        .args(args)
        .output()
        .context("running helm")?;
    ensure!(
        out.status.success(),
        "helm template {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
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

fn install(cp: &ControlPlane, name: &str, yaml: &str) -> anyhow::Result<()> {
    let _ = cp.kubectl(&["create", "namespace", "graft-system"]);
    kubectl_file(cp, name, yaml, &["apply"]).map(drop)
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

fn slice(name: &str, driver: &str, node: Option<&str>) -> String {
    let placement = match node {
        Some(n) => format!("nodeName: {n}"),
        None => "allNodes: true".into(),
    };
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata:\n  name: {name}\n\
         spec:\n  driver: {driver}\n  {placement}\n\
         \x20 pool: {{name: {name}, generation: 1, resourceSliceCount: 1}}\n\
         \x20 devices: [{{name: dev0}}]\n"
    )
}

/// kubectl as graft-driver's service account on `node`, as a pod-bound token makes it.
fn as_node(cp: &ControlPlane, node: &str, args: &[&str]) -> anyhow::Result<String> {
    let extra = format!("--as-user-extra=authentication.kubernetes.io/node-name={node}");
    let mut all = vec!["--as", GRAFT_SA, &extra];
    all.extend(args);
    cp.kubectl(&all)
}

/// A PUT of `yaml` (labelled `taken=yes`) as node-a's graft-driver, which may not get
/// slices (kubectl label would).
fn update(cp: &ControlPlane, yaml: String) -> anyhow::Result<String> {
    let yaml = yaml.replacen("metadata:\n", "metadata:\n  labels: {taken: \"yes\"}\n", 1);
    kubectl_file(
        cp,
        "update.yaml",
        &yaml,
        &[
            "--as",
            GRAFT_SA,
            "--as-user-extra=authentication.kubernetes.io/node-name=node-a",
            "replace",
        ],
    )
}

fn refused(r: anyhow::Result<String>, why: &str) -> anyhow::Result<()> {
    match r {
        Ok(out) => bail!("accepted ({why}): {out}"),
        Err(e) => {
            let e = format!("{e:#}");
            ensure!(
                e.contains("ValidatingAdmissionPolicy 'graft-resourceslices-own-node'"),
                "refused, but not by graft's policy ({why}): {e}"
            );
            Ok(())
        }
    }
}

/// A compromised node's graft-driver tries to write slices it must not: another driver's
/// (new, or one that exists on its node: update and delete), another node's, one for all
/// nodes. Every attempt is refused; its own graft.dev slices it writes as before.
#[test]
fn a_node_writes_only_graft_slices_of_its_own_node() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let cp = apiserver::shared()?;
    let yaml = render(
        &tb,
        &[
            "--show-only",
            "templates/10-rbac.yaml",
            "--show-only",
            "templates/20-admission-policy.yaml",
        ],
    )?;
    install(cp, "slices-policy.yaml", &yaml)?;

    // Active once another node's slice is refused (RBAC and the policy both arrive late).
    let probe = slice("probe-node-b", "graft.dev", Some("node-b"));
    until_active(|| {
        match kubectl_file(
            cp,
            "probe.yaml",
            &probe,
            &[
                "--as",
                GRAFT_SA,
                "--as-user-extra=authentication.kubernetes.io/node-name=node-a",
                "create",
            ],
        ) {
            Ok(_) => {
                cp.kubectl(&["delete", "resourceslice", "probe-node-b"])?;
                Ok(false)
            }
            Err(e) => Ok(format!("{e:#}").contains("may not write ResourceSlices of node node-b")),
        }
    })?;

    // Placed by the other driver (admin here), on node-a and node-b.
    kubectl_file(
        cp,
        "theirs.yaml",
        &(slice("theirs-node-a", "gpu.example.com", Some("node-a"))
            + "---\n"
            + &slice("graft-node-b", "graft.dev", Some("node-b"))),
        &["create"],
    )?;

    let mut attacks = 0;
    let attack = |name: &str, yaml: String| {
        kubectl_file(
            cp,
            &format!("{name}.yaml"),
            &yaml,
            &[
                "--as",
                GRAFT_SA,
                "--as-user-extra=authentication.kubernetes.io/node-name=node-a",
                "create",
            ],
        )
    };
    refused(
        attack(
            "foreign-driver",
            slice("foreign-driver", "gpu.example.com", Some("node-a")),
        ),
        "another driver's name on its own node",
    )?;
    attacks += 1;
    refused(
        attack("all-nodes", slice("all-nodes", "graft.dev", None)),
        "a slice for all nodes",
    )?;
    attacks += 1;
    refused(
        update(
            cp,
            slice("theirs-node-a", "gpu.example.com", Some("node-a")),
        ),
        "updating another driver's slice on its own node",
    )?;
    attacks += 1;
    refused(
        as_node(
            cp,
            "node-a",
            &["delete", "--wait=false", "resourceslice", "theirs-node-a"],
        ),
        "deleting another driver's slice on its own node",
    )?;
    attacks += 1;
    refused(
        update(cp, slice("graft-node-b", "graft.dev", Some("node-b"))),
        "updating another node's slice",
    )?;
    attacks += 1;
    refused(
        as_node(
            cp,
            "node-a",
            &["delete", "--wait=false", "resourceslice", "graft-node-b"],
        ),
        "deleting another node's slice",
    )?;
    attacks += 1;
    // None of them changed anything.
    let theirs = cp.kubectl(&[
        "get",
        "resourceslice",
        "theirs-node-a",
        "graft-node-b",
        "-o",
        "jsonpath={.items[*].metadata.labels}",
    ])?;
    ensure!(!theirs.contains("taken"), "{theirs}");
    ensure!(
        cp.kubectl(&["get", "resourceslice", "foreign-driver"])
            .is_err()
            && cp.kubectl(&["get", "resourceslice", "all-nodes"]).is_err()
    );
    eprintln!("{attacks} slice attacks, 0 accepted");

    // graft-driver's own work goes on: create, update, delete its node's graft.dev slice.
    attack("own", slice("own-node-a", "graft.dev", Some("node-a")))?;
    update(cp, slice("own-node-a", "graft.dev", Some("node-a")))?;
    as_node(
        cp,
        "node-a",
        &["delete", "--wait=false", "resourceslice", "own-node-a"],
    )?;
    Ok(())
}

fn event(name: &str, ns: &str, controller: &str, instance: &str, regarding: &str) -> String {
    format!(
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         eventTime: \"2026-01-01T00:00:00.000000Z\"\nreportingController: {controller}\n\
         reportingInstance: {instance}\naction: Test\nreason: Test\ntype: Normal\n\
         regarding: {regarding}\nnote: test\n"
    )
}

fn refused_event(r: anyhow::Result<String>, why: &str) -> anyhow::Result<()> {
    match r {
        Ok(out) => bail!("accepted ({why}): {out}"),
        Err(e) => {
            let e = format!("{e:#}");
            ensure!(
                e.contains("ValidatingAdmissionPolicy 'graft-events-own-node'"),
                "refused, but not by graft's policy ({why}): {e}"
            );
            Ok(())
        }
    }
}

/// A compromised node's graft-driver tries to speak for another node or component: Events
/// about another Node, reported as another node's graft-driver or as the kubelet, about an
/// object graft never reports on, and a patch of the kubelet's Event. All refused; its own
/// Events (on its Node, a pod, a claim) go through.
#[test]
fn a_node_posts_only_its_own_events() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let cp = apiserver::shared()?;
    let yaml = render(
        &tb,
        &[
            "--show-only",
            "templates/10-rbac.yaml",
            "--show-only",
            "templates/20-admission-policy.yaml",
        ],
    )?;
    install(cp, "events-policy.yaml", &yaml)?;
    let _ = cp.kubectl(&["create", "namespace", "events-tenant"]);
    let as_a = [
        "--as",
        GRAFT_SA,
        "--as-user-extra=authentication.kubernetes.io/node-name=node-a",
        "create",
    ];
    let node_b = "{apiVersion: v1, kind: Node, name: node-b}";
    until_active(|| {
        match kubectl_file(
            cp,
            "ev-probe.yaml",
            &event("probe", "default", "graft-driver", "node-a", node_b),
            &as_a,
        ) {
            Ok(_) => {
                cp.kubectl(&["delete", "events.events.k8s.io", "-n", "default", "probe"])?;
                Ok(false)
            }
            Err(e) => Ok(format!("{e:#}").contains("may not post Events about node node-b")),
        }
    })?;
    // The kubelet's Event on a tenant's pod.
    let pod = "{apiVersion: v1, kind: Pod, namespace: events-tenant, name: app, uid: u1}";
    kubectl_file(
        cp,
        "ev-kubelet.yaml",
        &event("kubelets", "events-tenant", "kubelet", "node-a", pod),
        &["create"],
    )?;
    let cases = [
        (
            "another node's Node",
            event("e1", "default", "graft-driver", "node-a", node_b),
        ),
        (
            "as another node's graft-driver",
            event("e2", "events-tenant", "graft-driver", "node-b", pod),
        ),
        (
            "as the kubelet",
            event("e3", "events-tenant", "kubelet", "node-a", pod),
        ),
        (
            "about a Secret",
            event(
                "e4",
                "events-tenant",
                "graft-driver",
                "node-a",
                "{apiVersion: v1, kind: Secret, namespace: events-tenant, name: s}",
            ),
        ),
    ];
    for (why, yaml) in &cases {
        refused_event(kubectl_file(cp, "ev.yaml", yaml, &as_a), why)?;
    }
    // A patch, as the recorder counts a repeat: through the API, as kubectl patch would
    // first read the Event (which graft may not).
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let graft = node_client(cp, "node-a").await?;
        let api: Api<Event> = Api::namespaced(graft.clone(), "events-tenant");
        // (An Event's other fields are immutable: its series is what a patch can change.)
        let forged = serde_json::json!({"series": {"count": 1000, "lastObservedTime": "2026-01-01T00:00:01.000000Z"}});
        refused_event(
            api.patch("kubelets", &PatchParams::default(), &Patch::Merge(&forged))
                .await
                .map(|_| String::new())
                .map_err(anyhow::Error::from),
            "patching the kubelet's Event",
        )?;
        eprintln!("{} event attacks, 0 accepted", cases.len() + 1);

        // graft-driver's own Events, through its own recorder: on its Node, a pod and a
        // claim, each posted twice (the second a patch that counts it).
        let poster = graft_driver::events::recorder(graft, "node-a");
        let ev = kube::runtime::events::Event {
            type_: kube::runtime::events::EventType::Normal,
            reason: "Test".into(),
            note: Some("own".into()),
            action: "Test".into(),
            secondary: None,
        };
        for r in [
            graft_driver::events::node_ref("node-a"),
            graft_driver::events::pod_ref("events-tenant", "app", "u1"),
            graft_driver::events::claim_ref("events-tenant", "c", "u2"),
        ] {
            for _ in 0..2 {
                poster
                    .publish(&ev, &r)
                    .await
                    .with_context(|| format!("{r:?}"))?;
            }
        }
        anyhow::Ok(())
    })
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

fn pod(name: &str, annotation: Option<&str>, claims: bool, limit: Option<(&str, bool)>) -> String {
    let mut y =
        format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: tenant\n");
    if let Some(a) = annotation {
        y += &format!("  annotations: {{required-plugins.noderesource.dev/pod: {a:?}}}\n");
    }
    y += "spec:\n";
    if claims {
        y += "  resourceClaims: [{name: dev, resourceClaimTemplateName: fuse}]\n";
    }
    let resources = |r: Option<&str>| match r {
        Some(r) => format!(", resources: {{limits: {{{r}: 1}}}}"),
        None => String::new(),
    };
    match limit {
        Some((r, true)) => {
            y += &format!(
                "  initContainers: [{{name: init, image: busybox{}}}]\n",
                resources(Some(r))
            );
            y += "  containers: [{name: app, image: busybox}]\n";
        }
        Some((r, false)) => {
            y += &format!(
                "  containers: [{{name: app, image: busybox{}}}]\n",
                resources(Some(r))
            );
        }
        None => y += "  containers: [{name: app, image: busybox}]\n",
    }
    y
}

/// The pod's annotations as the API server would store it (server-side dry run: the
/// mutating policies run, nothing is stored).
fn admitted(cp: &ControlPlane, yaml: &str) -> anyhow::Result<String> {
    kubectl_file(
        cp,
        "pod.yaml",
        yaml,
        &[
            "create",
            "--dry-run=server",
            "-o",
            "jsonpath={.metadata.annotations.required-plugins\\.noderesource\\.dev/pod}",
        ],
    )
}

/// A tenant cannot opt its pod out of requireGraftNri by setting the annotation itself, and
/// a pod that asks for a graft device by extended resource (no claims at admission: the
/// scheduler makes them) is marked too.
#[test]
fn require_graft_nri_marks_every_pod_that_asks_for_devices() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let cp = apiserver::shared()?;
    let yaml = render(
        &tb,
        &[
            "--set",
            "requireGraftNri.enabled=true",
            "--api-versions",
            "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
            "--show-only",
            "templates/60-require-graft-nri.yaml",
        ],
    )?;
    install(cp, "require-nri.yaml", &yaml)?;
    let _ = cp.kubectl(&["create", "namespace", "tenant"]);
    let _ = cp.kubectl(&["create", "serviceaccount", "default", "-n", "tenant"]);
    let marked = "[graft]";
    until_active(|| Ok(admitted(cp, &pod("probe", None, true, None))? == marked))?;

    let cases = [
        (
            "claims, annotation pre-set empty",
            pod("p1", Some("[]"), true, None),
        ),
        (
            "claims, annotation pre-set to another plugin",
            pod("p2", Some("[other]"), true, None),
        ),
        (
            "claims, annotation pre-set to nothing",
            pod("p3", Some(""), true, None),
        ),
        (
            "extended resource name",
            pod("p4", None, false, Some(("graft.dev/fuse", false))),
        ),
        (
            "extended resource name, annotation pre-set",
            pod("p5", Some("[]"), false, Some(("graft.dev/tun", false))),
        ),
        (
            "the class's implicit extended resource, in an init container",
            pod(
                "p6",
                None,
                false,
                Some(("deviceclass.resource.kubernetes.io/kvm.graft.dev", true)),
            ),
        ),
    ];
    for (what, yaml) in &cases {
        let got = admitted(cp, yaml)?;
        ensure!(got == marked, "{what}: annotation {got:?}, want {marked:?}");
    }
    eprintln!("{} pods that ask for devices, all marked", cases.len());
    // Pods that ask for no device are left alone (and keep their own annotation).
    ensure!(admitted(cp, &pod("plain", None, false, None))?.is_empty());
    ensure!(
        admitted(
            cp,
            &pod("own", Some("[other]"), false, Some(("cpu", false)))
        )? == "[other]"
    );
    Ok(())
}

/// The daemons' metrics listen on the pod's IP (the node's own cluster address, with
/// hostNetwork), not on every address of the node; the probes use no port at all.
#[test]
fn metrics_listen_on_the_pods_ip_only() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    for values in [&[][..], &["-f", "values-gpu.yaml"][..]] {
        let mut args = vec!["--show-only", "templates/50-daemonset.yaml"];
        let gpu = chart().join("values-gpu.yaml");
        if !values.is_empty() {
            args.extend(["-f", gpu.to_str().context("path")?]);
        }
        let ds = render(&tb, &args)?;
        let pod_ip = "- name: POD_IP\n              valueFrom:\n                fieldRef:\n                  fieldPath: status.podIP\n";
        ensure!(ds.matches(pod_ip).count() == 2, "{ds}");
        for port in ["9477", "9478"] {
            let want =
                format!("name: GRAFT_METRICS_ADDR\n              value: \"$(POD_IP):{port}\"");
            ensure!(ds.contains(&want), "{want:?} missing from:\n{ds}");
        }
        // POD_IP comes before its use in each container: the kubelet expands only those.
        for c in ds.split("- name: graft-").skip(1) {
            if let (Some(def), Some(used)) = (c.find("name: POD_IP"), c.find("$(POD_IP)")) {
                ensure!(def < used, "{c}");
            }
        }
        ensure!(!ds.contains("httpGet") && !ds.contains("tcpSocket"), "{ds}");
    }
    Ok(())
}

/// Another namespace's claim holds the device a tenant's claim was allocated (a stale
/// allocation, a scheduler race): the tenant's claim is refused, and neither the kubelet's
/// answer (the pod's Events) nor graft's PrepareFailed Event on the claim names the
/// holder's namespace, name or uid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_names_no_claim_of_another_namespace() -> anyhow::Result<()> {
    let cp = apiserver::shared()?;
    let devices = "[[devices]]\npath = \"/dev/null\"\nattributes = { type = \"test\" }\n";
    let node = DraNode::start(cp, "node-tenants", devices).await?;
    let c = &node.client;
    namespace(c, "victim-team").await?;
    namespace(c, "prober").await?;
    let (_, held) =
        claim_with_pod(c, "victim-team", "secret-project", "node-tenants", "null").await?;
    let e = &prepare(&node, &[&held]).await?[&uid(&held)].error;
    ensure!(e.is_empty(), "{e}");

    let (_, probe) = claim_with_pod(c, "prober", "probe", "node-tenants", "null").await?;
    let told = prepare(&node, &[&probe]).await?[&uid(&probe)].error.clone();
    ensure!(
        told.contains("null is already prepared for a claim of another namespace"),
        "{told}"
    );
    let hidden = ["victim-team", "secret-project", &uid(&held)];
    let start = Instant::now();
    let event = loop {
        let api: Api<Event> = Api::namespaced(c.clone(), "prober");
        let found = api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("PrepareFailed")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("probe")
            });
        if let Some(e) = found {
            break e.note.unwrap_or_default();
        }
        ensure!(
            start.elapsed() < Duration::from_secs(30),
            "no PrepareFailed Event on prober/probe"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for text in [&told, &event] {
        for h in hidden {
            ensure!(!text.contains(h), "{h:?} told to the prober: {text}");
        }
    }
    // A claim of the same namespace is named, as before.
    let (_, sibling) = claim_with_pod(c, "victim-team", "sibling", "node-tenants", "null").await?;
    let e = &prepare(&node, &[&sibling]).await?[&uid(&sibling)].error;
    ensure!(
        e.contains("prepared for claim victim-team/secret-project"),
        "{e}"
    );
    Ok(())
}
