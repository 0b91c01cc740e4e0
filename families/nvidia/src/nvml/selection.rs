//! GPUs named on graft-driver's command line, by UUID or NVML index.

use std::collections::BTreeSet;

/// A GPU selection item that is neither an NVML index nor a GPU UUID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{item:?} is neither a GPU index nor a GPU UUID (GPU-...); \
     give `all`, `none` or a comma-separated list"
)]
pub struct SelectionError {
    /// The item as given.
    pub item: String,
}

/// A set of the node's GPUs named on the command line: which GPUs graft partitions with
/// dynamic MIG (`--nvidia-dynamic-mig`), which it shares through MPS (`--nvidia-mps`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GpuSelection {
    /// No GPU.
    #[default]
    None,
    /// Every GPU.
    All,
    /// By UUID or NVML index.
    Gpus(BTreeSet<String>),
}

impl GpuSelection {
    /// `""`/`none`, `all`, or GPU UUIDs and indices separated by commas.
    pub fn parse(s: &str) -> Result<Self, SelectionError> {
        let s = s.trim();
        match s {
            "" | "none" => return Ok(GpuSelection::None),
            "all" => return Ok(GpuSelection::All),
            _ => {}
        }
        let mut gpus = BTreeSet::new();
        for item in s.split(',').map(str::trim) {
            let ok = item.parse::<u32>().is_ok()
                || (item.starts_with("GPU-")
                    && item.len() > 4
                    && item[4..].chars().all(|c| c.is_ascii_hexdigit() || c == '-'));
            if !ok {
                return Err(SelectionError {
                    item: item.to_string(),
                });
            }
            gpus.insert(item.to_string());
        }
        Ok(GpuSelection::Gpus(gpus))
    }

    /// Whether the GPU with this UUID and NVML index is in the set.
    pub fn covers_gpu(&self, uuid: &str, index: u32) -> bool {
        match self {
            GpuSelection::None => false,
            GpuSelection::All => true,
            GpuSelection::Gpus(set) => set.contains(uuid) || set.contains(&index.to_string()),
        }
    }
}
