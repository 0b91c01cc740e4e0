//! The node hostile_records attacks: containerd 2.2 and runc with graft-nri, a fake GPU as
//! graft-driver finds and publishes it, and records planted beside it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use graft_driver::discovery::Discovery;
use graft_driver::health::HealthReport;
use graft_driver::model::Device;
use graft_integration::cri::Pod;
use graft_integration::fake_gpu::FakeNode;
use graft_integration::records::{one_device_claim, plant};
use graft_integration::testbed::static_hook;
use graft_integration::{Containerd, Cri, GraftNri, Testbed, Version};
use graft_record::ContainerEdits;

use crate::common;

/// containerd 2.2 with graft-nri holding the fake node's policy, and gpu-2 of the fake node
/// as graft-driver finds it (its params copy in this node's state directory), published in
/// `devices.json` as graft-driver publishes it.
pub struct Node {
    _cd: Containerd,
    _nri: GraftNri,
    cri: Cri,
    pub state: PathBuf,
    pub gpu: Device,
}

pub async fn node(dir: &Path) -> anyhow::Result<Node> {
    let fake = FakeNode::create(&dir.join("node"))?;
    let hook = static_hook()?.to_string_lossy().into_owned();
    let state = dir.join("state");
    let roots = common::as_driver_root(&fake);
    let devices = common::discovery_in(&fake, roots, &hook, &state)?.discover()?;
    let gpu = devices
        .into_iter()
        .find(|d| d.name == "gpu-2")
        .context("gpu-2")?;
    std::fs::create_dir_all(&state)?;
    let snap = graft_driver::snapshot::snapshot(
        "graft.dev",
        "testbed",
        &[&gpu],
        &[],
        &HealthReport::default(),
    );
    graft_record::devices::write_snapshot(&state, &snap)?;
    let tb = Testbed::load()?;
    let cd = Containerd::start_with_runc(&tb, Version::V2_2, &dir.join("c"), &tb.runc_dir)?;
    let root = fake.host.to_string_lossy().into_owned();
    let mut nri = GraftNri::start(
        &cd.nri_socket,
        &state,
        &dir.join("graft-nri.log"),
        &["--hook-path", &hook, "--nvidia-driver-root", &root],
    )?;
    nri.wait_synchronized(Duration::from_secs(60))?;
    let cri = Cri::connect(&cd.socket, &dir.join("pods")).await?;
    Ok(Node {
        _cd: cd,
        _nri: nri,
        cri,
        state,
        gpu,
    })
}

impl Node {
    /// Plants `edits` as gpu-2's record for a new pod and creates a container in it: the
    /// runtime's error when refused, else `None` (the container is removed again).
    pub async fn try_create(
        &self,
        case: &str,
        edits: ContainerEdits,
    ) -> anyhow::Result<Option<String>> {
        let uid = format!("{case}-{}", std::process::id());
        plant(
            &self.state,
            &one_device_claim(
                &format!("claim-{uid}"),
                &format!("planted-{case}"),
                &uid,
                &["app"],
                "gpu-2",
                edits,
            ),
        )?;
        let pod: Pod = self.cri.run_pod(case, &uid).await?;
        let out = match self.cri.create(&pod, "app", "echo ran").await {
            // Started, so that its hooks run (runc runs them at task creation): on a node
            // that let the record through, this is where it would reach the host.
            Ok(id) => {
                let started = self.cri.start(&id).await;
                if case == "control" {
                    started.context("control: gpu-2's own container did not start")?;
                }
                None
            }
            Err(e) => Some(e.message().to_string()),
        };
        self.cri.remove_pod(&pod).await?;
        Ok(out)
    }
}
