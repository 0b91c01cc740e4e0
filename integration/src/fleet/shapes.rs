//! The simulated nodes' devices, made by graft's own code: the nvidia family's discovery
//! run once per node shape against a fake GPU node on disk (the fake NVML of
//! integration/fake-nvml, 8 x H100), then graft-driver's slice builder
//! ([`desired_slices`]) for each simulated node. What a node publishes is therefore what
//! graft-driver would publish on such a node, names, attributes, counters and all.

use std::path::Path;

use anyhow::Context;
use k8s_openapi::api::resource::v1::ResourceSlice;

use crate::fake_gpu::FakeNode;
use graft_driver::discovery::nvidia::NvidiaDiscovery;
use graft_driver::discovery::Discovery;
use graft_driver::health::taints::Tainting;
use graft_driver::model::{Attribute, Device};
use graft_driver::slices::{desired_slices, NodeOwner};

/// graft's driver name.
pub const DRIVER: &str = graft_api::DRIVER;

/// The fake library's MIG configuration with every GPU whole.
const WHOLE: &str = "mig 6 off\nmig 7 off\n";

/// A kind of simulated node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shape {
    /// An HGX board: 8 whole GPUs, NVLink islands of GPUs 0-3 and 4-7.
    Hgx,
    /// An HGX board with GPU 5 in MIG mode, offered whole or as dynamic MIG placements
    /// (partitionable devices sharing its counters).
    HgxMig,
    /// One of an NVL72 rack's 18 compute trays: 4 GPUs on one NVLink island, in the
    /// rack's NVLink clique, with IMEX channels for ComputeDomains.
    Nvl72,
}

/// The devices of each shape, discovered once.
pub struct Shapes {
    hgx: Vec<Device>,
    mig: Vec<Device>,
    nvl: Vec<Device>,
}

/// The GPU index a device belongs to (`gpu-<i>`, `gpu-<i>-...`), if any.
fn gpu_index(d: &Device) -> Option<usize> {
    d.name.strip_prefix("gpu-")?.split('-').next()?.parse().ok()
}

impl Shapes {
    /// Runs graft's discovery on three fake nodes made under `dir`.
    pub fn discover(dir: &Path) -> anyhow::Result<Self> {
        let hgx_node = FakeNode::create(&dir.join("hgx"))?;
        hgx_node.set_nvlink(&[&[0, 1, 2, 3], &[4, 5, 6, 7]])?;
        // The fake library starts with MIG on GPUs 6 and 7 (static MIG): a board of whole
        // GPUs has it off.
        hgx_node.configure_mig(WHOLE)?;
        let hgx =
            NvidiaDiscovery::new(hgx_node.nvidia_config(&dir.join("hgx-state/params"), "", 0)?)?
                .discover()
                .context("discovering the HGX shape")?;

        let mig_node = FakeNode::create(&dir.join("mig"))?;
        mig_node.set_nvlink(&[&[0, 1, 2, 3], &[4, 5, 6, 7]])?;
        let state = dir.join("mig-state");
        std::fs::create_dir_all(&state)?;
        mig_node.configure_mig(&format!(
            "{WHOLE}mig 5 on\nstate {}\n",
            state.join("mig").display()
        ))?;
        let mig = NvidiaDiscovery::new(mig_node.nvidia_config(&state.join("params"), "5", 0)?)?
            .discover()
            .context("discovering the HGX shape with dynamic MIG")?;

        // The fake library has 8 GPUs: a tray is its first four, in one fabric clique.
        let nvl_node = FakeNode::create(&dir.join("nvl"))?;
        nvl_node.set_nvlink(&[&[0, 1, 2, 3], &[4, 5, 6, 7]])?;
        nvl_node.configure_mig(WHOLE)?;
        nvl_node.set_fabric(Some(("d4ec2c5b1b3e4a4c9c5f000000000000", 0)))?;
        nvl_node.add_imex_channels(4)?;
        let nvl =
            NvidiaDiscovery::new(nvl_node.nvidia_config(&dir.join("nvl-state/params"), "", 4)?)?
                .discover()
                .context("discovering the NVL72 shape")?
                .into_iter()
                .filter(|d| gpu_index(d).is_none_or(|i| i < 4))
                .collect();
        Ok(Shapes { hgx, mig, nvl })
    }

    /// The devices of `shape`.
    pub fn devices(&self, shape: Shape) -> &[Device] {
        match shape {
            Shape::Hgx => &self.hgx,
            Shape::HgxMig => &self.mig,
            Shape::Nvl72 => &self.nvl,
        }
    }

    /// The NVLink clique of a node of `shape` in rack `rack` (`<cluster>.<rack>`): its IMEX
    /// channels' `cliqueID`, and the node label graft-driver sets from it
    /// (`resource.graft.dev/clique`, with ComputeDomains on).
    pub fn clique(&self, shape: Shape, rack: usize) -> Option<String> {
        let clique_key = graft_api::attributes::CLIQUE_ID;
        self.devices(shape)
            .iter()
            .find_map(|d| match d.attributes.get(clique_key) {
                Some(Attribute::String(c)) => Some(format!("{}.{rack}", c.split_once('.')?.0)),
                _ => None,
            })
    }

    /// The ResourceSlices graft-driver would publish on node `name` (uid `uid`) of
    /// `shape`; an NVL72 tray's devices carry the clique id of `rack`.
    pub fn slices(&self, shape: Shape, name: &str, uid: &str, rack: usize) -> Vec<ResourceSlice> {
        let clique_key = graft_api::attributes::CLIQUE_ID;
        let clique = self.clique(shape, rack);
        let devices: Vec<Device> = self
            .devices(shape)
            .iter()
            .cloned()
            .map(|mut d| {
                if let (Some(Attribute::String(c)), Some(rack_clique)) =
                    (d.attributes.get_mut(clique_key), &clique)
                {
                    c.clone_from(rack_clique);
                }
                d
            })
            .collect();
        let refs: Vec<&Device> = devices.iter().collect();
        let owner = NodeOwner {
            name: name.to_string(),
            uid: uid.to_string(),
        };
        desired_slices(DRIVER, &owner, &refs, 1, &Tainting::none(DRIVER))
    }
}
