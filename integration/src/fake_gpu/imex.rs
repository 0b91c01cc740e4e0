//! The fake node's IMEX parts: the static stand-ins for `nvidia-imex` and `nvidia-imex-ctl`
//! (integration/fake-nvml/nvidia-imex.c, nvidia-imex-ctl.c; what they need and do is in
//! their headers), the fabric registration state they and the fake NVML read, the IMEX
//! channel device nodes, and the config files the daemon takes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::{build_static_c, FakeNode, IMEX_MAJOR, LIB_DIR};

/// Compiles the fake IMEX daemon (integration/fake-nvml/nvidia-imex.c) to `out`.
pub fn build_fake_imex(out: &Path) -> anyhow::Result<()> {
    build_static_c("nvidia-imex.c", out)
}

/// Compiles the fake `nvidia-imex-ctl` (integration/fake-nvml/nvidia-imex-ctl.c) to `out`.
pub fn build_fake_imex_ctl(out: &Path) -> anyhow::Result<()> {
    build_static_c("nvidia-imex-ctl.c", out)
}

/// Installs both stand-ins in the node's driver root, beside nvidia-smi.
pub(super) fn install(node: &FakeNode) -> anyhow::Result<()> {
    for (path, build) in [
        (
            node.imex_path(),
            build_fake_imex as fn(&Path) -> anyhow::Result<()>,
        ),
        (node.imex_ctl_path(), build_fake_imex_ctl),
    ] {
        build(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// A fabric registration state, as NVML's `nvmlGpuFabricState_t` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FabricState {
    /// Registration finished: cluster UUID and clique are valid.
    Completed,
    /// Registration under way.
    InProgress,
    /// Registration not begun.
    NotStarted,
}

impl FabricState {
    fn word(self) -> &'static str {
        match self {
            FabricState::Completed => "completed",
            FabricState::InProgress => "in-progress",
            FabricState::NotStarted => "not-started",
        }
    }
}

/// One IMEX daemon's `config.cfg` and node list, as [`ImexConfig::write`] lays them out.
#[derive(Clone, Debug)]
pub struct ImexConfig {
    /// The nodes of the domain, one IP address each (NVIDIA's `nodes_config.cfg`).
    pub nodes: Vec<String>,
    /// This daemon's address (`BIND_INTERFACE_IP`); `None` leaves it to the daemon.
    pub bind_ip: Option<String>,
    /// `SERVER_PORT`, the peers' port.
    pub server_port: u16,
    /// `IMEX_CMD_PORT`, with `IMEX_CMD_ENABLED=1` and the command service bound to
    /// `bind_ip` when there is one.
    pub cmd_port: u16,
}

impl ImexConfig {
    /// Writes `<dir>/config.cfg` (no daemonizing, log in `<dir>/nvidia-imex.log`) and
    /// `<dir>/nodes_config.cfg`; returns the config's path.
    pub fn write(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
        let nodes = dir.join("nodes_config.cfg");
        let mut list = self.nodes.join("\n");
        list.push('\n');
        std::fs::write(&nodes, list).with_context(|| format!("{}", nodes.display()))?;
        let bind = self.bind_ip.as_deref().unwrap_or_default();
        let text = format!(
            "# written by graft's tests\nDAEMONIZE=0\nLOG_FILE_NAME={}\nSERVER_PORT={}\n\
             IMEX_NODE_CONFIG_FILE={}\nBIND_INTERFACE_IP={bind}\nIMEX_CMD_ENABLED=1\n\
             IMEX_CMD_PORT={}\nIMEX_CMD_BIND_INTERFACE_IP={bind}\n",
            dir.join("nvidia-imex.log").display(),
            self.server_port,
            nodes.display(),
            self.cmd_port,
        );
        let cfg = dir.join("config.cfg");
        std::fs::write(&cfg, text).with_context(|| format!("{}", cfg.display()))?;
        Ok(cfg)
    }
}

impl FakeNode {
    /// The fake `nvidia-imex`, at `/usr/bin` in the driver root, as this host sees it.
    pub fn imex_path(&self) -> PathBuf {
        self.host.join("usr/bin/nvidia-imex")
    }

    /// The fake `nvidia-imex-ctl`, beside [`FakeNode::imex_path`].
    pub fn imex_ctl_path(&self) -> PathBuf {
        self.host.join("usr/bin/nvidia-imex-ctl")
    }

    /// Like [`FakeNode::set_fabric`], with the registration `state`: until it is
    /// `Completed`, NVML reports no cluster or clique and the fake IMEX daemon refuses to
    /// start.
    pub fn set_fabric_state(
        &self,
        uuid_hex: &str,
        clique: u32,
        state: FabricState,
    ) -> anyhow::Result<()> {
        let path = self.host.join(&LIB_DIR[1..]).join("fake-nvml-fabric");
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, format!("{uuid_hex}:{clique}:{}\n", state.word()))
            .with_context(|| format!("{}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("{}", path.display()))
    }

    /// The IMEX channel device node `channel<n>` under the fake /dev, as the driver
    /// creates them: `/dev/nvidia-caps-imex-channels/channel<n>`, character major
    /// [`IMEX_MAJOR`] (`nvidia-caps-imex-channels` in the fake /proc/devices), minor `n`.
    pub fn imex_channel_path(&self, n: u32) -> PathBuf {
        self.dev
            .join(format!("nvidia-caps-imex-channels/channel{n}"))
    }

    /// Creates channels `0..count` (see [`FakeNode::imex_channel_path`]), mode 0666 as
    /// NVIDIA's instructions make them; existing ones are kept. Needs root (mknod).
    pub fn add_imex_channels(&self, count: u32) -> anyhow::Result<()> {
        for n in 0..count {
            let path = self.imex_channel_path(n);
            if std::fs::symlink_metadata(&path).is_ok() {
                continue;
            }
            if let Some(d) = path.parent() {
                std::fs::create_dir_all(d).with_context(|| format!("{}", d.display()))?;
            }
            nix::sys::stat::mknod(
                &path,
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::from_bits_truncate(0o666),
                nix::sys::stat::makedev(IMEX_MAJOR.into(), n.into()),
            )
            .with_context(|| format!("mknod {} (needs root)", path.display()))?;
        }
        Ok(())
    }
}
