//! The multi-node testbed (`GRAFT_CLUSTER_NODES=N cluster.sh up`, nodes in
//! `integration/testbed/cluster/nodes.sh`): the first node `graft-node` on the host, nodes
//! `graft-node-2..N` each a kubelet and a containerd in network and mount namespaces of
//! their own, one control plane. Each node has its own fake NVIDIA node at the one driver
//! root the chart names ([`super::gpu::FAKE_DIR`]): the first node's is that directory on
//! the host, the others' are bind-mounted over it in their mount namespaces, so graft in
//! GPU mode, installed once as a DaemonSet, sees a different node (and fabric clique) on
//! each. Tests take their turn through [`super::gpu::own_cluster`].

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

use super::gpu::{GpuValues, FAKE_DIR, MIG_STATE};
use super::{run, Cluster, Kubernetes};
use crate::fake_gpu::FakeNode;
use crate::testbed::Testbed;

pub mod domains;

/// The cluster's directory on the host (cluster.sh's default GRAFT_CLUSTER_DIR).
const CLUSTER_DIR: &str = "/var/lib/graft-cluster";
/// cluster.sh's sockets.
const RUN_DIR: &str = "/run/graft-cluster";
/// The first node's name (cluster.sh's default GRAFT_NODE_NAME).
pub const FIRST_NODE: &str = "graft-node";
/// Where the chart's graft-scheduler-extender answers kube-scheduler (values.yaml's default,
/// on the host network).
pub const EXTENDER: &str = "127.0.0.1:8897";
/// Where it serves its metrics and probes.
pub const EXTENDER_METRICS: &str = "127.0.0.1:9480";

/// A multi-node testbed cluster; taken down on drop (see [`Cluster`]'s Drop) unless
/// `GRAFT_KEEP_CLUSTER` is set.
pub struct MultiCluster {
    /// The cluster (kubectl, helm, apply; its crictl is the first node's).
    pub cluster: Cluster,
    /// Node names, the first node first.
    pub nodes: Vec<String>,
    /// Each node's fake NVIDIA node, as the host sees it, in the order of `nodes`.
    pub fakes: Vec<FakeNode>,
}

/// Where extra node `i` (2..) keeps its copy of a path it bind-mounts (nodes.sh's naming).
fn node_mount_source(i: usize, path: &str) -> PathBuf {
    PathBuf::from(format!(
        "{CLUSTER_DIR}/nodes/{i}/mnt{}",
        path.replace('/', "_")
    ))
}

impl MultiCluster {
    /// Brings up a fresh cluster of `nodes` nodes (at least 2) without graft, and a fake
    /// NVIDIA node for each (no fabric yet). A cluster already running is taken down first.
    pub fn up(nodes: usize) -> anyhow::Result<Self> {
        Self::up_with(nodes, None)
    }

    /// [`MultiCluster::up`] on the Kubernetes `k8s`.
    pub fn up_on(nodes: usize, k8s: Kubernetes) -> anyhow::Result<Self> {
        Self::start(nodes, None, None, k8s)
    }

    /// [`MultiCluster::up`], with kube-scheduler calling graft-scheduler-extender at
    /// `extender` (a URL; cluster.sh's GRAFT_SCHEDULER_EXTENDER) when given.
    pub fn up_with(nodes: usize, extender: Option<&str>) -> anyhow::Result<Self> {
        Self::up_with_tls(nodes, extender, None)
    }

    /// [`MultiCluster::up_with`], kube-scheduler calling over HTTPS with the certificates in
    /// `tls` (cluster.sh's GRAFT_SCHEDULER_EXTENDER_TLS: ca.crt, client.crt, client.key).
    pub fn up_with_tls(
        nodes: usize,
        extender: Option<&str>,
        tls: Option<&Path>,
    ) -> anyhow::Result<Self> {
        Self::start(nodes, extender, tls, Kubernetes::Newest)
    }

    fn start(
        nodes: usize,
        extender: Option<&str>,
        tls: Option<&Path>,
        k8s: Kubernetes,
    ) -> anyhow::Result<Self> {
        if nodes < 2 {
            bail!("a multi-node testbed has at least 2 nodes, not {nodes}");
        }
        let tb = Testbed::load()?;
        let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let scripts = top.join("integration/testbed/cluster");
        run(super::script(&scripts, "cluster.sh", k8s).arg("down"))?;
        // The first node's graft keeps its claims in the host's /var/lib/graft, which `down`
        // keeps when it was there before: claims prepared for a cluster taken down without
        // unpreparing them would hold their devices in this one, whose kubelet never heard
        // of them (as Cluster::start does for a cluster it finds running).
        super::forget_prepared_claims();
        let bins = match k8s {
            Kubernetes::Newest => &tb.k8s,
            Kubernetes::V1_34 => &tb.k8s_134,
        };
        // Made before `up`, so that its Drop takes down what a failed `up` left running.
        let cluster = Cluster {
            kubectl: bins.join("kubectl"),
            helm: tb.helm.clone(),
            crictl: tb.crictl.clone(),
            kubeconfig: PathBuf::from(format!("{CLUSTER_DIR}/admin.kubeconfig")),
            endpoint: format!("unix://{RUN_DIR}/containerd.sock"),
            scripts: scripts.clone(),
            k8s,
        };
        let mut up = super::script(&scripts, "cluster.sh", k8s);
        up.arg("up").env("GRAFT_CLUSTER_NODES", nodes.to_string());
        if let Some(url) = extender {
            up.env("GRAFT_SCHEDULER_EXTENDER", url);
        }
        if let Some(dir) = tls {
            up.env("GRAFT_SCHEDULER_EXTENDER_TLS", dir);
        }
        run(&mut up)?;
        let names = std::iter::once(FIRST_NODE.to_string())
            .chain((2..=nodes).map(|i| format!("graft-node-{i}")))
            .collect();
        // The first node's fake goes into the (empty) mount point itself: removing it would
        // take the other nodes' bind mounts over it away.
        let first = FakeNode::create(Path::new(FAKE_DIR))?;
        first.configure_mig(&format!("state {MIG_STATE}\n"))?;
        std::fs::create_dir_all(Path::new(MIG_STATE).parent().context("MIG state dir")?)?;
        let mut fakes = vec![first];
        for i in 2..=nodes {
            // A copy of the first: its absolute symlinks name FAKE_DIR, which in node i's
            // mount namespace is this copy.
            let dir = node_mount_source(i, FAKE_DIR);
            run(Command::new("cp")
                .arg("-a")
                .arg(format!("{FAKE_DIR}/."))
                .arg(&dir))?;
            let state = node_mount_source(i, "/var/lib/graft").join("fake-nvml");
            std::fs::create_dir_all(&state)?;
            fakes.push(FakeNode {
                host: dir.join("host"),
                proc: dir.join("proc"),
                sys: dir.join("sys"),
                dev: dir.join("host/dev"),
            });
        }
        Ok(MultiCluster {
            cluster,
            nodes: names,
            fakes,
        })
    }

    /// Installs graft from the chart in GPU mode (values-gpu.yaml) on every node's fake,
    /// after putting node `i`'s GPUs in fabric `fabrics[i]` (cluster UUID as 32 hex digits,
    /// clique id; `None`: no fabric); returns once every node has published its GPUs.
    pub fn deploy_gpu(&self, fabrics: &[Option<(&str, u32)>]) -> anyhow::Result<()> {
        self.deploy_gpu_with(fabrics, &GpuValues::default())
    }

    /// [`MultiCluster::deploy_gpu`] with the chart values `values` (more `--set`s in its
    /// `helm`).
    pub fn deploy_gpu_with(
        &self,
        fabrics: &[Option<(&str, u32)>],
        values: &GpuValues,
    ) -> anyhow::Result<()> {
        if fabrics.len() != self.fakes.len() {
            bail!("{} fabrics for {} nodes", fabrics.len(), self.fakes.len());
        }
        for (fake, fabric) in self.fakes.iter().zip(fabrics) {
            fake.set_fabric(*fabric)?;
        }
        self.cluster
            .deploy_graft_gpu_values(Path::new(FAKE_DIR), values)?;
        for node in &self.nodes {
            super::wait_until(&format!("{node} published no GPU"), || {
                Ok(self.slices(node)?.contains("\"gpu-"))
            })?;
        }
        Ok(())
    }

    /// Labels the first node as the control plane: kube-scheduler runs beside it, and the
    /// chart's graft-scheduler-extender goes to control-plane nodes.
    pub fn label_control_plane(&self) -> anyhow::Result<()> {
        self.cluster.kubectl(&[
            "label",
            "node",
            FIRST_NODE,
            "node-role.kubernetes.io/control-plane=",
            "--overwrite",
        ])?;
        Ok(())
    }

    /// Waits until the chart's graft-scheduler-extender is rolled out and says it is ready
    /// on its metrics address (the chart's default, on the first node's host network).
    pub fn wait_extender(&self) -> anyhow::Result<()> {
        self.cluster.kubectl(&[
            "-n",
            "graft-system",
            "rollout",
            "status",
            "daemonset/graft-scheduler-extender",
            "--timeout=120s",
        ])?;
        super::wait_until("the extender never became ready", || {
            Ok(crate::scrape::tcp_get(EXTENDER_METRICS, "/readyz").is_ok_and(|(s, _)| s == 200))
        })?;
        Ok(())
    }

    /// The ResourceSlices of graft on `node`, as JSON.
    pub fn slices(&self, node: &str) -> anyhow::Result<String> {
        let selector = format!("spec.driver=graft.dev,spec.nodeName={node}");
        self.cluster.kubectl(&[
            "get",
            "resourceslices",
            "--field-selector",
            &selector,
            "-o",
            "json",
        ])
    }

    /// Runs crictl against `node`'s containerd.
    pub fn crictl(&self, node: &str, args: &[&str]) -> anyhow::Result<String> {
        let endpoint = match node.strip_prefix("graft-node-") {
            Some(i) => format!("unix://{RUN_DIR}/n{i}/containerd.sock"),
            None => self.cluster.endpoint.clone(),
        };
        run(Command::new(&self.cluster.crictl)
            .arg("--runtime-endpoint")
            .arg(endpoint)
            .args(args)
            .stderr(std::process::Stdio::null()))
    }

    /// The network namespace of extra node `node` (`ip netns` name); `None` for the first.
    pub fn netns(&self, node: &str) -> Option<String> {
        node.strip_prefix("graft-node-")
            .map(|i| format!("graft-n{i}"))
    }

    /// Stops extra node `node`'s kubelet (the node goes NotReady after the API server's
    /// grace period).
    pub fn stop_kubelet(&self, node: &str) -> anyhow::Result<()> {
        self.node_cmd(node, "stop-kubelet")
    }

    /// Starts extra node `node`'s kubelet again.
    pub fn start_kubelet(&self, node: &str) -> anyhow::Result<()> {
        self.node_cmd(node, "start-kubelet")
    }

    fn node_cmd(&self, node: &str, what: &str) -> anyhow::Result<()> {
        run(
            super::script(&self.cluster.scripts, "cluster.sh", self.cluster.k8s)
                .args(["node", node, what]),
        )?;
        Ok(())
    }

    /// Takes the cluster down and says what it left on the host, if anything: network
    /// namespaces, links, mounts, the nodes' processes, cgroups, directories.
    pub fn down(self) -> anyhow::Result<Vec<String>> {
        let pids = node_pids();
        run(super::script(&self.cluster.scripts, "cluster.sh", self.cluster.k8s).arg("down"))?;
        let mut left = Vec::new();
        for ns in run(Command::new("ip").args(["netns", "list"]))?.lines() {
            if ns.starts_with("graft-n") {
                left.push(format!("netns {ns}"));
            }
        }
        for link in run(Command::new("ip").args(["-o", "link", "show"]))?.lines() {
            let name = link.split(':').nth(1).unwrap_or("").trim();
            let name = name.split('@').next().unwrap_or("");
            let veth = name.strip_prefix("gn").and_then(|n| n.strip_suffix('h'));
            let veth = veth.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            if name == "graftnodes" || name == "graft0" || veth {
                left.push(format!("link {name}"));
            }
        }
        for m in std::fs::read_to_string("/proc/self/mountinfo")?.lines() {
            let point = m.split(' ').nth(4).unwrap_or("");
            if point.starts_with(CLUSTER_DIR) || point.starts_with(RUN_DIR) {
                left.push(format!("mount {point}"));
            }
        }
        // A killed process may take a moment to go on a loaded host; a pid reused since by
        // someone else's process (another comm) is not ours.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut alive: Vec<_> = pids;
        loop {
            alive.retain(|(comm, _, pid)| still_running(pid, comm));
            if alive.is_empty() || std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        for (comm, node, pid) in alive {
            left.push(format!("process {comm} of node {node} ({pid})"));
        }
        for h in std::fs::read_dir("/sys/fs/cgroup")? {
            let h = h?.path();
            for i in 2..=self.nodes.len() {
                let c = h.join(format!("graft-node-{i}"));
                if c.exists() {
                    left.push(format!("cgroup {}", c.display()));
                }
            }
        }
        for d in [CLUSTER_DIR, RUN_DIR] {
            if Path::new(d).exists() {
                left.push(format!("directory {d}"));
            }
        }
        Ok(left)
    }
}

/// Whether process `pid` runs (not a zombie) under the name `comm`.
fn still_running(pid: &str, comm: &str) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // "pid (comm) state ...": comm may hold spaces, so split at the last ')'.
    let Some((head, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let name = head.split_once('(').map(|(_, n)| n).unwrap_or("");
    name == comm && !rest.trim_start().starts_with('Z')
}

/// The extra nodes' processes, from their pid files: (comm, node, pid).
fn node_pids() -> Vec<(String, String, String)> {
    let mut pids = Vec::new();
    let Ok(nodes) = std::fs::read_dir(format!("{CLUSTER_DIR}/nodes")) else {
        return pids;
    };
    for node in nodes.flatten() {
        let Ok(files) = std::fs::read_dir(node.path().join("run")) else {
            continue;
        };
        for f in files.flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if let Some(what) = name.strip_suffix(".pid") {
                if let Ok(pid) = std::fs::read_to_string(f.path()) {
                    let node = node.file_name().to_string_lossy().into_owned();
                    pids.push((what.to_string(), node, pid.trim().to_string()));
                }
            }
        }
    }
    pids
}
