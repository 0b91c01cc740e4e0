//! One node as graft-driver sees it: a Node object in a real API server, a kubelet
//! directory, containerd 2.2 with graft-nri (whose status gates every prepare), and
//! graft-driver itself, spoken to over its sockets as the kubelet would.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use graft_proto::dra::v1;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, PostParams};
use tonic::transport::Channel;

use crate::apiserver::ControlPlane;
use crate::claims::claim_msg;
use crate::containerd::{Containerd, Version};
use crate::driver::{DriverOpts, GraftDriver};
use crate::nri::GraftNri;
use crate::testbed::Testbed;

// Defined with the claims (which name it in their allocations), published here too.
pub use crate::claims::DRIVER_NAME;

/// A node without a kubelet: containerd, graft-nri and graft-driver, registered with a
/// control plane; the tests speak the kubelet's side.
pub struct DraNode {
    /// The node's name.
    pub name: String,
    /// Its files; removed on drop.
    pub dir: tempfile::TempDir,
    /// A client of the control plane.
    pub client: kube::Client,
    /// Its containerd.
    pub containerd: Containerd,
    /// Its graft-nri.
    pub nri: GraftNri,
    /// Its graft-driver.
    pub driver: GraftDriver,
    /// The DRA socket named by the registration socket's GetInfo.
    pub endpoint: PathBuf,
    /// graft's state directory.
    pub state_dir: PathBuf,
    /// The file graft reads the boot id from.
    pub boot_id_path: PathBuf,
    /// The state directory is a tmpfs of its own (unmounted on drop).
    state_mounted: bool,
}

/// Where a node keeps graft's state directory.
enum StateAt<'a> {
    /// In the node's temp directory.
    Temp,
    /// On a tmpfs of this size of its own.
    Tmpfs(&'a str),
    /// In this directory (a bench's disk).
    Dir(&'a Path),
}

impl DraNode {
    /// Brings the node up with `devices_toml` as the char backend's config.
    pub async fn start(cp: &ControlPlane, name: &str, devices_toml: &str) -> anyhow::Result<Self> {
        Self::start_with(cp, name, devices_toml, &[]).await
    }

    /// [`DraNode::start`] with more graft-driver arguments.
    pub async fn start_with(
        cp: &ControlPlane,
        name: &str,
        devices_toml: &str,
        driver_args: &[&str],
    ) -> anyhow::Result<Self> {
        Self::start_inner(cp, name, devices_toml, driver_args, StateAt::Temp, None).await
    }

    /// [`DraNode::start_with`] with graft's state directory at `state_dir` (it must be
    /// empty or absent), and `driver_bin` run instead of the workspace's graft-driver if
    /// given.
    pub async fn start_on_dir(
        cp: &ControlPlane,
        name: &str,
        devices_toml: &str,
        driver_args: &[&str],
        state_dir: &Path,
        driver_bin: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let bin = driver_bin.map(Path::to_path_buf);
        let state = StateAt::Dir(state_dir);
        Self::start_inner(cp, name, devices_toml, driver_args, state, bin).await
    }

    /// Like [`DraNode::start`], with the state directory on a tmpfs of `size` (e.g. `2m`),
    /// for tests that fill it up or remount it read-only.
    pub async fn start_on_tmpfs(
        cp: &ControlPlane,
        name: &str,
        devices_toml: &str,
        size: &str,
    ) -> anyhow::Result<Self> {
        Self::start_inner(cp, name, devices_toml, &[], StateAt::Tmpfs(size), None).await
    }

    async fn start_inner(
        cp: &ControlPlane,
        name: &str,
        devices_toml: &str,
        driver_args: &[&str],
        state_at: StateAt<'_>,
        driver_bin: Option<PathBuf>,
    ) -> anyhow::Result<Self> {
        let tb = Testbed::load()?;
        let client = cp.client().await?;
        let nodes: Api<Node> = Api::all(client.clone());
        if nodes.get_opt(name).await?.is_none() {
            let mut node = Node::default();
            node.metadata.name = Some(name.to_string());
            nodes.create(&PostParams::default(), &node).await?;
        }
        // Short paths: socket paths are limited to 108 bytes.
        let dir = tempfile::Builder::new().prefix("gd").tempdir_in("/tmp")?;
        let state_dir = match state_at {
            StateAt::Dir(d) => d.to_path_buf(),
            _ => dir.path().join("state"),
        };
        let state_mounted = matches!(state_at, StateAt::Tmpfs(_));
        if let StateAt::Tmpfs(size) = state_at {
            std::fs::create_dir_all(&state_dir)?;
            crate::mounts::mount_tmpfs(&state_dir, size)?;
        }
        let boot_id_path = dir.path().join("boot_id");
        std::fs::write(
            &boot_id_path,
            std::fs::read_to_string(graft_record::BOOT_ID_PATH)?,
        )?;
        let config = dir.path().join("devices.toml");
        std::fs::write(&config, devices_toml)?;
        std::fs::create_dir_all(dir.path().join("logs"))?;

        let containerd = Containerd::start(&tb, Version::V2_2, &dir.path().join("c"))?;
        let boot_arg = boot_id_path.to_string_lossy().into_owned();
        let mut nri = GraftNri::start(
            &containerd.nri_socket,
            &state_dir,
            &dir.path().join("logs/graft-nri.log"),
            &["--boot-id-path", &boot_arg],
        )?;
        nri.wait_synchronized(Duration::from_secs(30))?;

        let mut driver = GraftDriver::start(DriverOpts {
            driver_name: DRIVER_NAME.into(),
            node_name: name.into(),
            kubelet_dir: dir.path().join("kubelet"),
            state_dir: state_dir.clone(),
            device_config: config,
            boot_id_path: boot_id_path.clone(),
            kubeconfig: cp.kubeconfig.clone(),
            pod_uid: None,
            log: dir.path().join("logs/graft-driver.log"),
            extra: driver_args.iter().map(|s| s.to_string()).collect(),
            binary: driver_bin,
        })?;
        let (_, endpoint) = driver
            .wait_registered(Duration::from_secs(30))
            .await
            .context("graft-driver did not come up")?;
        Ok(DraNode {
            name: name.to_string(),
            dir,
            client,
            containerd,
            nri,
            driver,
            endpoint,
            state_dir,
            boot_id_path,
            state_mounted,
        })
    }

    /// `rel` below the node's directory.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Restarts graft-driver (after a kill or a crash point) and waits for registration.
    pub async fn restart_driver(&mut self, crash_at: Option<&str>) -> anyhow::Result<()> {
        let _ = self.driver.kill9();
        self.driver.spawn(crash_at)?;
        let (_, endpoint) = self.driver.wait_registered(Duration::from_secs(30)).await?;
        self.endpoint = endpoint;
        Ok(())
    }

    /// A client of graft-driver's DRA service (v1).
    pub async fn dra(&self) -> anyhow::Result<v1::dra_plugin_client::DraPluginClient<Channel>> {
        self.driver.dra(&self.endpoint).await
    }

    /// The record of claim `claim_uid`, if there is one.
    pub fn record(&self, claim_uid: &str) -> anyhow::Result<Option<graft_record::ClaimRecord>> {
        Ok(graft_record::RecordStore::open(&self.state_dir)?.get_claim(claim_uid)?)
    }

    /// The checkpoint, parsed: the valid slot with the highest sequence number.
    pub fn checkpoint(&self) -> anyhow::Result<serde_json::Value> {
        let mut best = serde_json::json!({"seq": 0, "claims": {}});
        for slot in self.checkpoint_slots() {
            let Ok(data) = std::fs::read(&slot) else {
                continue;
            };
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(&data) else {
                continue;
            };
            if v["seq"].as_u64() > best["seq"].as_u64() {
                best = v;
            }
        }
        Ok(best)
    }

    /// The checkpoint's two slot files.
    pub fn checkpoint_slots(&self) -> [PathBuf; 2] {
        ["a", "b"].map(|s| self.state_dir.join(format!("driver/checkpoint-{s}.json")))
    }

    /// Where the node's processes log.
    pub fn log_dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for DraNode {
    fn drop(&mut self) {
        let _ = self.driver.kill9();
        let _ = self.nri.stop();
        self.containerd.teardown();
        if self.state_mounted {
            let _ = crate::mounts::unmount(&self.state_dir);
        }
    }
}

/// NodePrepareResources (v1) for `claims`, as the kubelet sends it.
pub async fn prepare(
    node: &DraNode,
    claims: &[&ResourceClaim],
) -> anyhow::Result<BTreeMap<String, v1::NodePrepareResourceResponse>> {
    let mut dra = node.dra().await?;
    let r = dra
        .node_prepare_resources(v1::NodePrepareResourcesRequest {
            claims: claims.iter().map(|c| claim_msg(c)).collect(),
        })
        .await?;
    Ok(r.into_inner().claims.into_iter().collect())
}

/// NodeUnprepareResources (v1).
pub async fn unprepare(
    node: &DraNode,
    claims: &[v1::Claim],
) -> anyhow::Result<BTreeMap<String, String>> {
    let mut dra = node.dra().await?;
    let r = dra
        .node_unprepare_resources(v1::NodeUnprepareResourcesRequest {
            claims: claims.to_vec(),
        })
        .await?;
    Ok(r.into_inner()
        .claims
        .into_iter()
        .map(|(k, v)| (k, v.error))
        .collect())
}
