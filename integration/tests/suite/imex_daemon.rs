//! graft-imex-daemon, the IMEX daemon pod's entry point, against a real kube-apiserver and
//! the fake node's `nvidia-imex` (integration/fake-nvml/nvidia-imex.c): daemons of the
//! members of one clique become READY per `--check`; a member of another clique is left
//! out of the node list; a member dropped from the domain's record stops its IMEX daemon
//! and leaves the other not ready; a member replaced in its place is resolved again by the
//! survivor without a restart; SIGTERM stops the child and exits 0; a child that dies
//! on its own fails the process; two domains' daemons on one address use their own ports.
//! The chart's ServiceAccount for the daemons may read the records in graft's namespace and
//! nothing more, and the controller is told to use it and the driver root.
//!
//! No cluster and no controller: the test writes the domain's record (a ConfigMap, here in
//! the domain's namespace) as the controller would, and runs the daemons as processes, each on its own loopback address
//! (127.28.<test>.<node>, as hostNetwork pods have the node's). Needs the testbed's API
//! server, root (FakeNode) and the workspace binaries (`cargo build --workspace --bins`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use graft_compute_domain::crd::{NodeStatus, Readiness};
use graft_compute_domain::record::Record;
use graft_compute_domain::ComputeDomain;
use graft_integration::apiserver::{self, ControlPlane};
use graft_integration::fake_gpu::FakeNode;
use graft_integration::testbed::workspace_bin;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt, ResourceExt};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::json;

use crate::compute_domain_api::chart::{apply_rendered, can_i};

const CLUSTER: &str = "5d0c9e2f3a4b4c5d8e6f00112233ccdd";
const CLIQUE: &str = "5d0c9e2f-3a4b-4c5d-8e6f-00112233ccdd.1";
const OTHER_CLIQUE: &str = "5d0c9e2f-3a4b-4c5d-8e6f-00112233ccdd.2";
const WAIT: Duration = Duration::from_secs(60);

/// The ComputeDomain suite's API server (its CRD is installed there).
fn cp() -> anyhow::Result<&'static ControlPlane> {
    apiserver::named("compute_domain")
}

async fn client() -> anyhow::Result<kube::Client> {
    let c = cp()?.client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    match crds
        .create(&PostParams::default(), &ComputeDomain::crd())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let domains: Api<ComputeDomain> = Api::all(c.clone());
    let start = Instant::now();
    while domains.list(&Default::default()).await.is_err() {
        if start.elapsed() > WAIT {
            bail!("the CRD is not served within {WAIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(c)
}

/// One member: a fake driver root in the domain's clique and a graft-imex-daemon process.
struct Member {
    ip: String,
    root: FakeNode,
    imex_dir: PathBuf,
    log: PathBuf,
    proc: Child,
}

impl Member {
    fn start(dir: &Path, ip: &str, cd: &ComputeDomain, test: u8) -> anyhow::Result<Self> {
        let root = FakeNode::create(&dir.join(ip))?;
        root.set_fabric(Some((CLUSTER, 1)))?;
        let imex_dir = dir.join(ip).join("imex");
        let log = dir.join(ip).join("graft-imex-daemon.log");
        let out = std::fs::File::create(&log)?;
        // The pod's own /etc/hosts, which the daemon maps the members' names in and the fake
        // nvidia-imex resolves them through.
        let hosts = dir.join(ip).join("hosts");
        std::fs::write(&hosts, "127.0.0.1\tlocalhost\n")?;
        let mut cmd = Command::new(workspace_bin("graft-imex-daemon")?);
        cmd.env_clear()
            .env("KUBECONFIG", &cp()?.kubeconfig)
            .env("COMPUTE_DOMAIN_UID", cd.uid().context("uid")?)
            .env("COMPUTE_DOMAIN_NAME", cd.name_any())
            .env(
                "COMPUTE_DOMAIN_NAMESPACE",
                cd.namespace().unwrap_or_default(),
            )
            .env("COMPUTE_DOMAIN_NUM_NODES", "2")
            .env("COMPUTE_DOMAIN_CLIQUE", CLIQUE)
            .env("GRAFT_RECORD_NAMESPACE", cd.namespace().unwrap_or_default())
            .env("NODE_NAME", format!("node-{ip}"))
            .env("POD_IP", ip)
            .env("GRAFT_IMEX_HOSTS_FILE", &hosts)
            .env("FAKE_IMEX_HOSTS", &hosts)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        for (k, v) in Self::paths(&root, &imex_dir, test) {
            cmd.env(k, v);
        }
        let proc = cmd.spawn().context("starting graft-imex-daemon")?;
        Ok(Member {
            ip: ip.into(),
            root,
            imex_dir,
            log,
            proc,
        })
    }

    fn paths(root: &FakeNode, imex_dir: &Path, test: u8) -> Vec<(&'static str, String)> {
        vec![
            ("GRAFT_DRIVER_ROOT", root.host.display().to_string()),
            ("GRAFT_IMEX_DIR", imex_dir.display().to_string()),
            (
                "GRAFT_IMEX_SERVER_PORT",
                format!("{}", 45_370 + u16::from(test)),
            ),
            (
                "GRAFT_IMEX_CMD_PORT",
                format!("{}", 45_380 + u16::from(test)),
            ),
        ]
    }

    /// `graft-imex-daemon --check`, as the readiness probe runs it.
    fn check(&self) -> anyhow::Result<Output> {
        let mut cmd = Command::new(workspace_bin("graft-imex-daemon")?);
        cmd.arg("--check").env_clear();
        for (k, v) in Self::paths(&self.root, &self.imex_dir, 0) {
            if !k.ends_with("_PORT") {
                cmd.env(k, v);
            }
        }
        Ok(cmd.output()?)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `--check` prints a line starting with `want`, and its exit is `ok`.
    async fn wait_check(&self, want: &str, ok: bool) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            let out = self.check()?;
            let said = String::from_utf8_lossy(&out.stdout).into_owned();
            if said.starts_with(want) && out.status.success() == ok {
                return Ok(());
            }
            if start.elapsed() > WAIT {
                bail!(
                    "{}: --check said {said:?} ({}), not {want:?}; log:\n{}",
                    self.ip,
                    out.status,
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn exit_within(&mut self, limit: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(st) = self.proc.try_wait()? {
                return Ok(st);
            }
            if start.elapsed() > limit {
                bail!("{} did not exit; log:\n{}", self.ip, self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The pid of its nvidia-imex child (spawned from any of its threads).
    fn child_pid(&self) -> anyhow::Result<i32> {
        let pid = self.proc.id();
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            let kids = std::fs::read_to_string(task?.path().join("children")).unwrap_or_default();
            if let Some(p) = kids.split_whitespace().next() {
                return Ok(p.parse()?);
            }
        }
        bail!("{} has no child", self.ip)
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.proc.id() as i32), Signal::SIGTERM);
        if self.exit_within(Duration::from_secs(15)).is_err() {
            let _ = self.proc.kill();
            let _ = self.proc.wait();
        }
    }
}

async fn domain_with(c: &kube::Client, ns: &str, name: &str) -> anyhow::Result<ComputeDomain> {
    graft_integration::claims::namespace(c, ns).await?;
    let cd: ComputeDomain = serde_json::from_value(json!({
        "apiVersion": "resource.graft.dev/v1alpha1", "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "w"}}},
    }))?;
    let api: Api<ComputeDomain> = Api::namespaced(c.clone(), ns);
    Ok(api.create(&PostParams::default(), &cd).await?)
}

/// Sets the domain's members as a controller that records no places would: (address,
/// clique).
async fn set_members(
    c: &kube::Client,
    cd: &ComputeDomain,
    m: &[(&str, &str)],
) -> anyhow::Result<()> {
    write_members(c, cd, m, None).await
}

async fn write_members(
    c: &kube::Client,
    cd: &ComputeDomain,
    m: &[(&str, &str)],
    places: Option<&[u32]>,
) -> anyhow::Result<()> {
    let nodes = m
        .iter()
        .enumerate()
        .map(|(k, (ip, clique))| NodeStatus {
            name: format!("node-{ip}"),
            ip_address: ip.to_string(),
            clique_id: clique.to_string(),
            status: Readiness::NotReady,
            index: places.and_then(|p| p.get(k).copied()),
        })
        .collect();
    let ns = cd.namespace().unwrap_or_default();
    let r = Record {
        namespace: ns.clone(),
        name: cd.name_any(),
        nodes,
        ..Default::default()
    };
    let cm = r.to_config_map(&cd.uid().context("uid")?, &ns);
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), &ns);
    api.patch(
        &cm.name_any(),
        &PatchParams::apply("test").force(),
        &Patch::Apply(&cm),
    )
    .await?;
    Ok(())
}

/// Sets the domain's members as the controller records them, each with its place.
async fn set_places(c: &kube::Client, cd: &ComputeDomain, m: &[(&str, u32)]) -> anyhow::Result<()> {
    let nodes: Vec<(&str, &str)> = m.iter().map(|(ip, _)| (*ip, CLIQUE)).collect();
    let places: Vec<u32> = m.iter().map(|(_, i)| *i).collect();
    write_members(c, cd, &nodes, Some(&places)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_of_one_clique_become_ready_and_a_dropped_member_stops() -> anyhow::Result<()> {
    let c = client().await?;
    let cd = domain_with(&c, "imexd-1", "d").await?;
    let (a, b, other) = ("127.28.1.1", "127.28.1.2", "127.28.1.3");
    set_members(&c, &cd, &[(b, CLIQUE), (a, CLIQUE), (other, OTHER_CLIQUE)]).await?;
    let dir = tempfile::tempdir()?;
    let mut ma = Member::start(dir.path(), a, &cd, 1)?;
    let mb = Member::start(dir.path(), b, &cd, 1)?;
    ma.wait_check("READY", true).await?;
    mb.wait_check("READY", true).await?;
    // The member of the other clique is not in the list (else neither could be ready).
    let list = std::fs::read_to_string(ma.imex_dir.join("nodes_config.cfg"))?;
    assert_eq!(list, "graft-imex-0\ngraft-imex-1\n");

    // b leaves: its IMEX daemon stops (no daemon answers); a's stays READY (IMEX needs no
    // quorum), alone in a list that no longer names b.
    set_members(&c, &cd, &[(a, CLIQUE), (other, OTHER_CLIQUE)]).await?;
    mb.wait_check("", false).await?;
    ma.wait_check("READY", true).await?;

    // SIGTERM is forwarded and the process exits 0.
    kill(Pid::from_raw(ma.proc.id() as i32), Signal::SIGTERM)?;
    let st = ma.exit_within(Duration::from_secs(15))?;
    assert!(st.success(), "{st}; log:\n{}", ma.log());
    ma.wait_check("", false).await?;
    Ok(())
}

/// The node list names the domain's places; IMEX starts once the domain's members are
/// listed. A member replaced in its place (the old one gone, a new one at another address)
/// is mapped anew and the survivor's nvidia-imex resolves it again on SIGUSR1: never
/// restarted, the newcomer mapped under the place's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_member_is_resolved_again_without_a_restart() -> anyhow::Result<()> {
    let c = client().await?;
    let cd = domain_with(&c, "imexd-3", "d").await?;
    let (a, b, n3) = ("127.28.3.1", "127.28.3.2", "127.28.3.3");
    set_places(&c, &cd, &[(a, 0)]).await?;
    let dir = tempfile::tempdir()?;
    let ma = Member::start(dir.path(), a, &cd, 3)?;
    let mb = Member::start(dir.path(), b, &cd, 3)?;
    // One of two members listed: no IMEX yet, so nothing answers the probe.
    tokio::time::sleep(Duration::from_secs(2)).await;
    ma.wait_check("", false).await?;
    assert!(!ma.imex_dir.join("config.cfg").exists(), "{}", ma.log());
    set_places(&c, &cd, &[(a, 0), (b, 1)]).await?;
    ma.wait_check("READY", true).await?;
    mb.wait_check("READY", true).await?;
    let first = ma.child_pid()?;
    // b goes, n3 takes its place: a's IMEX resolves graft-imex-1 anew.
    drop(mb);
    let m3 = Member::start(dir.path(), n3, &cd, 3)?;
    set_places(&c, &cd, &[(a, 0), (n3, 1)]).await?;
    m3.wait_check("READY", true).await?;
    ma.wait_check("READY", true).await?;
    // READY says nothing of peers (IMEX needs no quorum): wait for a's mapping of n3.
    let hosts_path = dir.path().join(a).join("hosts");
    let mapped = |h: &str| h.contains(&format!("{n3}\tgraft-imex-1")) && !h.contains(b);
    let start = std::time::Instant::now();
    let mut hosts = std::fs::read_to_string(&hosts_path)?;
    while !mapped(&hosts) && start.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        hosts = std::fs::read_to_string(&hosts_path)?;
    }
    anyhow::ensure!(mapped(&hosts), "a's hosts file:\n{hosts}");
    anyhow::ensure!(
        ma.child_pid()? == first,
        "a's nvidia-imex was restarted:\n{}",
        ma.log()
    );
    anyhow::ensure!(!ma.log().contains("restarting nvidia-imex"), "{}", ma.log());
    Ok(())
}

/// Two domains' daemons on the same addresses (hostNetwork), each on its slot's ports:
/// both form, and `--check` asks each its own (the port is in the config it reads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_domains_on_the_same_nodes_use_their_own_ports() -> anyhow::Result<()> {
    let c = client().await?;
    let (a, b) = ("127.28.4.1", "127.28.4.2");
    let (d1, d2) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let mut members = Vec::new();
    for (ns, dir, test) in [("imexd-4", &d1, 4), ("imexd-5", &d2, 5)] {
        let cd = domain_with(&c, ns, "d").await?;
        set_members(&c, &cd, &[(a, CLIQUE), (b, CLIQUE)]).await?;
        members.push(Member::start(dir.path(), a, &cd, test)?);
        members.push(Member::start(dir.path(), b, &cd, test)?);
    }
    for m in &members {
        m.wait_check("READY", true).await?;
    }
    // On shared ports one domain's IMEX cannot listen, its daemon exits (the other answers).
    for m in &mut members {
        anyhow::ensure!(
            m.proc.try_wait()?.is_none(),
            "{} exited:\n{}",
            m.ip,
            m.log()
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_dies_fails_the_pod() -> anyhow::Result<()> {
    let c = client().await?;
    let cd = domain_with(&c, "imexd-2", "d").await?;
    let (a, b) = ("127.28.2.1", "127.28.2.2");
    set_members(&c, &cd, &[(a, CLIQUE), (b, CLIQUE)]).await?;
    let dir = tempfile::tempdir()?;
    let mut ma = Member::start(dir.path(), a, &cd, 2)?;
    let _mb = Member::start(dir.path(), b, &cd, 2)?;
    ma.wait_check("READY", true).await?;
    kill(Pid::from_raw(ma.child_pid()?), Signal::SIGKILL)?;
    let st = ma.exit_within(Duration::from_secs(15))?;
    assert!(!st.success(), "{st}; log:\n{}", ma.log());
    assert!(ma.log().contains("exited on its own"), "{}", ma.log());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chart_lets_the_daemons_read_records_and_nothing_more() -> anyhow::Result<()> {
    let _c = client().await?;
    let cp = cp()?;
    let tb = graft_integration::Testbed::load()?;
    let template = "templates/71-imex-daemon-rbac.yaml";
    let rendered = tb.render_chart(&[
        "--set",
        "computeDomains.enabled=true",
        "--show-only",
        template,
    ])?;
    assert!(
        tb.render_chart(&[])?.find("graft-imex-daemon").is_none(),
        "on by default"
    );
    let controller = tb.render_chart(&[
        "--set",
        "computeDomains.enabled=true",
        "--set",
        "nvidia.driverRoot=/run/nvidia/driver",
        "--show-only",
        "templates/70-compute-domain-controller.yaml",
    ])?;
    for arg in [
        "--daemon-service-account=graft-imex-daemon",
        "--daemon-driver-root=/run/nvidia/driver",
    ] {
        assert!(controller.contains(arg), "{arg} not in:\n{controller}");
    }
    apply_rendered(cp, &rendered)?;
    let can = |args: &[&str]| can_i(cp, "graft-imex-daemon", args);
    // What graft-imex-daemon's watch of its domain's record needs, in graft's namespace...
    for call in [
        &["watch", "configmaps", "-n", "graft-system"][..],
        &["list", "configmaps", "-n", "graft-system"],
        &["get", "configmaps", "-n", "graft-system"],
    ] {
        assert!(can(call), "the chart's RBAC does not allow {call:?}");
    }
    // ...and not more.
    for call in [
        &["get", "computedomains.resource.graft.dev", "-n", "x"][..],
        &["list", "configmaps", "-n", "x"],
        &["patch", "configmaps", "-n", "graft-system"],
        &["patch", "computedomains.resource.graft.dev", "-n", "x"],
        &[
            "patch",
            "computedomains.resource.graft.dev",
            "--subresource=status",
            "-n",
            "x",
        ],
        &["list", "pods", "-n", "graft-system"],
        &["get", "secrets", "-n", "graft-system"],
        &["list", "nodes"],
    ] {
        assert!(!can(call), "the chart's RBAC allows {call:?}");
    }
    Ok(())
}
