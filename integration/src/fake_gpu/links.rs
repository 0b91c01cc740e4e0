//! The fake node's NVLink: its fabric clique (IMEX) and the islands NVLink joins its GPUs
//! in, both files next to the fake `libnvidia-ml.so.1` that it reads on every call.

use anyhow::Context;

use super::{FakeNode, LIB_DIR};

impl FakeNode {
    /// Puts every GPU of the node in NVLink fabric clique `clique` of cluster `uuid_hex` (32
    /// hex digits), or takes the node out of any fabric (`None`): the file
    /// `fake-nvml-fabric` next to `libnvidia-ml.so.1`, read on every call.
    pub fn set_fabric(&self, fabric: Option<(&str, u32)>) -> anyhow::Result<()> {
        let path = self.host.join(&LIB_DIR[1..]).join("fake-nvml-fabric");
        match fabric {
            Some((uuid_hex, clique)) => {
                let tmp = path.with_extension("tmp");
                std::fs::write(&tmp, format!("{uuid_hex}:{clique}\n"))
                    .with_context(|| format!("{}", tmp.display()))?;
                std::fs::rename(&tmp, &path).with_context(|| format!("{}", path.display()))
            }
            None => match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(e).with_context(|| format!("{}", path.display()))
                }
                _ => Ok(()),
            },
        }
    }

    /// Joins the node's GPUs by NVLink in `islands` (NVML indices; every two GPUs of one
    /// island joined), or none (`&[]`): the file `fake-nvml-nvlink` next to
    /// `libnvidia-ml.so.1` (format in integration/fake-nvml/src/nvlink.rs), read on every call.
    pub fn set_nvlink(&self, islands: &[&[usize]]) -> anyhow::Result<()> {
        let path = self.host.join(&LIB_DIR[1..]).join("fake-nvml-nvlink");
        let text: String = islands
            .iter()
            .map(|i| {
                let ids: Vec<String> = i.iter().map(usize::to_string).collect();
                format!("{}\n", ids.join(","))
            })
            .collect();
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).with_context(|| format!("{}", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("{}", path.display()))
    }
}
