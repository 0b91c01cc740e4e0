//! The GPU tests' cluster: one testbed cluster per test process, shared by its tests one at
//! a time (and with cluster_e2e, which takes its turn through [`own_cluster`]), with graft
//! installed from the chart in GPU mode (values-gpu.yaml) on the fake NVIDIA node. Every test starts from a fresh install: no pods or claims left, graft
//! uninstalled, a new fake node (events, MIG state, lost GPUs) and none of graft's GPU
//! state (MPS, health), then graft installed with the test's values. The cluster is taken
//! down when the test process exits (GRAFT_KEEP_CLUSTER=1 keeps it).

use std::any::Any;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, Once, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};

use super::{run, wait_until, Cluster, Kubernetes};
use crate::fake_gpu::FakeNode;

/// Where the fake NVIDIA node lives on the host (graft-driver sees it below /host).
pub const FAKE_DIR: &str = "/var/lib/graft-cluster/fake-nvidia";
/// Where the fake NVML keeps its MIG instances: a path graft-driver's container can write
/// (its state directory is the same host path inside), standing in for the GPU's own.
pub const MIG_STATE: &str = "/var/lib/graft/fake-nvml/mig-state";
/// The namespaces GPU tests put pods in (besides `default`); made at the first install.
pub const NAMESPACES: [&str; 2] = ["a", "b"];
/// Where graft-gpu-check's cluster stage runs its pods (`gpu_check::cluster`); the bed
/// makes and cleans it with the others.
pub const CHECK_NAMESPACE: &str = "gpu-check";
/// graft's state a fresh install must not find: what GPU work left behind.
const GPU_STATE: [&str; 3] = [
    "/var/lib/graft/mps",
    "/var/lib/graft/health",
    "/var/lib/graft/fake-nvml",
];

/// graft's values for a GPU test, beyond values-gpu.yaml and the fake node's driver root.
#[derive(Debug, Clone)]
pub struct GpuValues {
    /// nvidia.dynamicMig.
    pub dynamic_mig: String,
    /// nvidia.mps.
    pub mps: String,
    /// More `helm` arguments (`--set`, `--set-json`), in order.
    pub helm: Vec<String>,
}

impl Default for GpuValues {
    fn default() -> Self {
        GpuValues {
            dynamic_mig: "none".into(),
            mps: "none".into(),
            helm: Vec::new(),
        }
    }
}

/// Whose NVIDIA driver graft is installed on.
#[derive(Debug, Clone, Copy)]
pub enum GpuNode<'a> {
    /// The fake node at this directory (integration/src/fake_gpu.rs).
    Fake(&'a Path),
    /// This node's real driver, at this driver root (`/`, `/run/nvidia/driver`).
    Driver(&'a Path),
}

/// The GPU cluster and the fake node it runs on, shared by a test process.
pub struct GpuBed {
    /// The cluster.
    pub cluster: Cluster,
    /// The fake NVIDIA node graft is installed on.
    pub node: FakeNode,
}

static BED: OnceLock<Mutex<Option<GpuBed>>> = OnceLock::new();

/// A cluster a test module keeps up between its tests ([`keep`]), such as
/// compute_domain_cluster's three nodes. Only touched with [`BED`] held: it is taken down when
/// another test takes the host's cluster, and when the process exits.
static KEPT: Mutex<Option<Box<dyn Any + Send>>> = Mutex::new(None);

extern "C" fn take_down() {
    if let Some(m) = BED.get() {
        // Dropping the cluster takes it down (see Cluster's Drop).
        let bed = m.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(bed);
    }
    drop_kept();
}

fn drop_kept() {
    let kept = KEPT.lock().unwrap_or_else(|p| p.into_inner()).take();
    drop(kept);
}

/// Takes down at exit whatever cluster the process leaves up.
fn take_down_at_exit() {
    static ONCE: Once = Once::new();
    // SAFETY: registers a plain extern "C" function with no arguments, as atexit
    // requires; it runs once when the test process exits normally.
    ONCE.call_once(|| unsafe {
        libc::atexit(take_down);
    });
}

/// The shared bed, locked for one test; the cluster comes up on first use.
pub fn bed() -> anyhow::Result<MutexGuard<'static, Option<GpuBed>>> {
    bed_on(Kubernetes::Newest)
}

/// [`bed`] on the Kubernetes `k8s`: a bed on another one is taken down first.
pub fn bed_on(k8s: Kubernetes) -> anyhow::Result<MutexGuard<'static, Option<GpuBed>>> {
    let m = BED.get_or_init(|| Mutex::new(None));
    // A test that failed while holding it leaves a cluster that the next test reinstalls.
    let mut guard = m.lock().unwrap_or_else(|p| p.into_inner());
    if guard.as_ref().is_some_and(|b| b.cluster.k8s() != k8s) {
        // Dropping a cluster takes it down (see Cluster's Drop).
        drop(guard.take());
    }
    if guard.is_none() {
        drop_kept();
        let cluster = Cluster::up_on(k8s)?;
        for ns in NAMESPACES.into_iter().chain([CHECK_NAMESPACE]) {
            cluster.apply(&format!(
                "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"
            ))?;
        }
        let node = new_fake_node()?;
        *guard = Some(GpuBed { cluster, node });
        take_down_at_exit();
    }
    Ok(guard)
}

/// The turn of a test that brings its own cluster up (cluster_e2e): the shared bed and any
/// kept cluster are taken down, and no GPU test starts until the returned guard is dropped.
/// One testbed cluster runs per host.
pub fn own_cluster() -> MutexGuard<'static, Option<GpuBed>> {
    let m = BED.get_or_init(|| Mutex::new(None));
    let mut guard = m.lock().unwrap_or_else(|p| p.into_inner());
    // Dropping a cluster takes it down (see Cluster's Drop).
    drop(guard.take());
    drop_kept();
    guard
}

/// [`own_cluster`] for a test whose module keeps its cluster between its tests: the cluster
/// of type `T` the last of them kept ([`keep`]) is handed back instead of being taken down
/// (one of another type is taken down).
pub fn own_kept_cluster<T: Any + Send>() -> (MutexGuard<'static, Option<GpuBed>>, Option<T>) {
    let m = BED.get_or_init(|| Mutex::new(None));
    let mut guard = m.lock().unwrap_or_else(|p| p.into_inner());
    // Dropping the cluster takes it down (see Cluster's Drop).
    drop(guard.take());
    let kept = KEPT.lock().unwrap_or_else(|p| p.into_inner()).take();
    let kept = kept.and_then(|k| k.downcast::<T>().ok()).map(|k| *k);
    (guard, kept)
}

/// Keeps `cluster` up for the next test of its module, which gets it from
/// [`own_kept_cluster`]; call it while holding that turn. Taken down at exit otherwise.
pub fn keep<T: Any + Send>(cluster: T) {
    *KEPT.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(cluster));
    take_down_at_exit();
}

/// A fake NVIDIA node at [`FAKE_DIR`], made anew.
fn new_fake_node() -> anyhow::Result<FakeNode> {
    match std::fs::remove_dir_all(FAKE_DIR) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {FAKE_DIR}")),
    }
    FakeNode::create(Path::new(FAKE_DIR))
}

/// Runs one GPU test on the shared bed.
pub fn with_bed<T>(test: impl FnOnce(&mut GpuBed) -> anyhow::Result<T>) -> anyhow::Result<T> {
    with_bed_on(Kubernetes::Newest, test)
}

/// [`with_bed`] on a bed of the Kubernetes `k8s`.
pub fn with_bed_on<T>(
    k8s: Kubernetes,
    test: impl FnOnce(&mut GpuBed) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mut guard = bed_on(k8s)?;
    let bed = guard.as_mut().context("the GPU bed is gone")?;
    test(bed)
}

impl GpuBed {
    /// A fresh install: what earlier tests left is removed, the fake node is made anew and
    /// handed to `before_start` (a GPU lost before graft starts, MIG state), then graft is
    /// installed with `values`. Returns once graft has published its ResourceSlices.
    pub fn fresh(
        &mut self,
        values: &GpuValues,
        before_start: impl FnOnce(&FakeNode) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        fresh_install(&self.cluster, &mut self.node, values, before_start)
    }
}

/// [`GpuBed::fresh`] on the bed's parts, for callers that hold the cluster elsewhere too.
pub fn fresh_install(
    c: &Cluster,
    node: &mut FakeNode,
    values: &GpuValues,
    before_start: impl FnOnce(&FakeNode) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    // One kubectl per namespace (it deletes the kinds in this order, then waits for all).
    for ns in ["default", NAMESPACES[0], NAMESPACES[1], CHECK_NAMESPACE] {
        c.kubectl(&[
            "-n",
            ns,
            "delete",
            "pods,resourceclaims,resourceclaimtemplates",
            "--all",
            "--wait=true",
        ])?;
    }
    // A test that failed half way may leave claims graft never unprepares (its setup was
    // stuck, or graft was down): they would fail every later test. graft is reinstalled
    // on a new fake node anyway, so its records and checkpoint go with the old install.
    let stuck = super::workloads::wait_unprepared(c).err();
    c.uninstall_graft()?;
    if let Some(e) = stuck {
        eprintln!("GPU bed: {e:#}; removing graft's records and checkpoint before reinstalling");
        super::forget_prepared_claims();
    }
    // graft-mps mounts a tmpfs per MPS tenancy in the host's namespace; one its uninstall
    // cut short would keep the directory busy.
    unmount_below(GPU_STATE[0]);
    for dir in GPU_STATE {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {dir}")),
        }
    }
    std::fs::create_dir_all(Path::new(MIG_STATE).parent().context("MIG state dir")?)?;
    *node = new_fake_node()?;
    node.configure_mig(&format!("state {MIG_STATE}\n"))?;
    before_start(node)?;
    c.deploy_graft_gpu_values(Path::new(FAKE_DIR), values)
}

/// Detaches every mount below `dir` (deepest first).
fn unmount_below(dir: &str) {
    let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|m| m.starts_with(&format!("{dir}/")))
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in mounts {
        let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
    }
}

impl Cluster {
    /// Removes graft's release and waits until none of its pods is left.
    pub fn uninstall_graft(&self) -> anyhow::Result<()> {
        let listed = self.helm(&["list", "-n", "graft-system", "-q"])?;
        if listed.lines().any(|l| l.trim() == "graft") {
            self.helm(&["uninstall", "graft", "-n", "graft-system", "--wait"])?;
        }
        let start = Instant::now();
        loop {
            let pods = self.kubectl(&["-n", "graft-system", "get", "pods", "-o", "name"])?;
            if pods.trim().is_empty() {
                return Ok(());
            }
            ensure!(
                start.elapsed() < super::WAIT,
                "graft's pods outlived its uninstall: {pods}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Installs graft in GPU mode on the fake node at `fake` with `values`, from the debug
    /// build.
    pub fn deploy_graft_gpu_values(&self, fake: &Path, values: &GpuValues) -> anyhow::Result<()> {
        let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        self.deploy_graft_gpu(&top.join("target/debug"), GpuNode::Fake(fake), values)
    }

    /// Installs graft from the binaries in `bin` in GPU mode (values-gpu.yaml) with
    /// `values`, on `node`; returns once it has published a GPU.
    pub fn deploy_graft_gpu(
        &self,
        bin: &Path,
        node: GpuNode<'_>,
        values: &GpuValues,
    ) -> anyhow::Result<()> {
        let (var, dir) = match node {
            GpuNode::Fake(d) => ("GRAFT_GPU_FAKE", d),
            GpuNode::Driver(d) => ("GRAFT_GPU_DRIVER_ROOT", d),
        };
        run(super::script(&self.scripts, "deploy-graft.sh", self.k8s)
            .arg(bin)
            .env(var, dir)
            .env("GRAFT_GPU_DYNAMIC_MIG", &values.dynamic_mig)
            .env("GRAFT_GPU_MPS", &values.mps)
            .env("GRAFT_HELM_ARGS", values.helm.join("\n")))?;
        wait_until("the GPUs were never published", || {
            Ok(self
                .kubectl(&["get", "resourceslices", "-o", "json"])?
                .contains("\"gpu-"))
        })?;
        Ok(())
    }
}
