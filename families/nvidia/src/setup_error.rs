//! Why one of the nvidia family's setups failed, in the family's own words: MIG, MPS,
//! ComputeDomains, persistence mode, nvidia-smi and the GPU's driver binding. The core
//! carries it as [`SetupError::Family`] and shows its text unchanged.

use graft_driver_core::claims::setup_error::{FamilyError, SetupError};

/// Why one of the nvidia family's setups failed, or its undoing.
#[derive(Debug, thiserror::Error)]
pub enum NvidiaSetupError {
    /// Another driver than the two graft switches between holds the function.
    #[error("{pci} is bound to {driver}, neither nvidia nor vfio-pci; leaving it alone")]
    ForeignDriver {
        /// The function, as a PCI bus ID.
        pci: String,
        /// The driver bound to it.
        driver: String,
    },
    /// Persistence mode could not be read or set.
    #[error("persistence mode of GPU {pci}: {reason}")]
    Persistence {
        /// The GPU, as a PCI bus ID.
        pci: String,
        /// What failed.
        reason: String,
    },
    /// A driver tool (nvidia-smi) failed.
    #[error("{tool} {args} failed ({status}): {stderr}")]
    Tool {
        /// The program.
        tool: String,
        /// Its arguments, joined.
        args: String,
        /// How it exited.
        status: String,
        /// What it wrote to stderr.
        stderr: String,
    },
    /// A MIG instance could not be made or removed.
    #[error("{reason}")]
    Mig {
        /// What failed.
        reason: String,
    },
    /// The GPU's MPS control daemon could not be started or stopped, or a share is invalid.
    #[error("MPS: {reason}")]
    Mps {
        /// What failed.
        reason: String,
    },
    /// A ComputeDomain's channel cannot be handed out (yet): the kubelet retries.
    #[error("ComputeDomain {domain}: {reason}")]
    ComputeDomain {
        /// `namespace/name`.
        domain: String,
        /// Why not.
        reason: String,
    },
}

impl FamilyError for NvidiaSetupError {
    fn withheld(&self) -> Option<String> {
        match self {
            // A tool's output can say anything about the node: only its name is shown.
            NvidiaSetupError::Tool { tool, .. } => {
                let name = tool.rsplit('/').next().unwrap_or(tool);
                Some(format!("{name} failed on the node"))
            }
            _ => None,
        }
    }
}

impl From<NvidiaSetupError> for SetupError {
    fn from(e: NvidiaSetupError) -> Self {
        SetupError::Family(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Carried by the core, the text is the family's, and the variant can be had back.
    #[test]
    fn the_core_carries_it_unchanged() {
        let e: SetupError = NvidiaSetupError::Mps {
            reason: "no daemon".into(),
        }
        .into();
        assert_eq!(e.to_string(), "MPS: no daemon");
        assert!(matches!(
            e.family::<NvidiaSetupError>(),
            Some(NvidiaSetupError::Mps { reason }) if reason == "no daemon"
        ));
        assert!(std::error::Error::source(&e).is_none());
    }

    /// Only nvidia-smi's name reaches a claim's author, never what it wrote.
    #[test]
    fn a_tools_output_is_withheld() {
        let tool = NvidiaSetupError::Tool {
            tool: "/usr/bin/nvidia-smi".into(),
            args: "-i 0000:01:00.0 compute-policy".into(),
            status: "exit status: 2".into(),
            stderr: "GPU 0000:01:00.0 is in use by pid 4242".into(),
        };
        assert_eq!(
            tool.withheld().as_deref(),
            Some("nvidia-smi failed on the node")
        );
        let failed = graft_driver_core::claims::input::ClaimError::Setup {
            device: "gpu-0".into(),
            source: tool.into(),
        };
        assert_eq!(
            failed.for_tenant("ns"),
            "device gpu-0: nvidia-smi failed on the node (graft-driver's log on the node says why)"
        );
        let mig = NvidiaSetupError::Mig {
            reason: "no space".into(),
        };
        assert_eq!(mig.withheld(), None);
    }
}
