//! The families' parts of the opaque `DeviceConfig`: one field per family that has
//! fields of its own, each parsed, merged and checked by its family (a family without
//! any has no line here). The generic part ([`super`]) calls only what is below.

use serde_json::{Map, Value};

use crate::discovery::nvidia::domain::config::DomainConfigError;
use crate::discovery::nvidia::opaque::NvidiaOpaque;

/// Why a configuration of a family's own kind is refused, as that family says.
#[derive(Debug, thiserror::Error)]
pub enum FamilyKindError {
    /// NVIDIA's: a ComputeDomain configuration.
    #[error(transparent)]
    Nvidia(#[from] DomainConfigError),
}

/// A family's setting and the devices it applies to, in the family's words: the core's
/// refusals name them, and hold no family's words of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applies {
    /// The setting, as users spell it (`sharing`).
    pub setting: &'static str,
    /// The devices it applies to.
    pub to: &'static str,
}

/// Optional edits a configuration asks for by name (NVIDIA's driver capabilities), with
/// the words to refuse them in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionalEdits {
    /// The names asked for, as the devices' optional edits are keyed.
    pub names: Vec<&'static str>,
    /// The setting that asked, and the devices it applies to.
    pub applies: Applies,
    /// What one of them is called (`driver capability`).
    pub item: &'static str,
    /// What provides their files on the node.
    pub provider: &'static str,
}

/// Every family's part of one configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FamilyConfig {
    /// NVIDIA's: `sharing`, `driverCapabilities`.
    pub nvidia: NvidiaOpaque,
}

impl FamilyConfig {
    /// The fields the families own, as users spell them.
    pub fn fields() -> impl Iterator<Item = &'static str> {
        NvidiaOpaque::FIELDS.iter().copied()
    }

    /// The kinds of configuration besides `DeviceConfig` that a family owns.
    pub fn kinds() -> impl Iterator<Item = &'static str> {
        crate::discovery::nvidia::domain::DomainConfig::KINDS
            .iter()
            .copied()
    }

    /// A configuration of a family's own kind (one of [`Self::kinds`]).
    pub(super) fn of_kind(kind: &str, params: &Value) -> Result<Self, FamilyKindError> {
        Ok(FamilyConfig {
            nvidia: NvidiaOpaque::of_kind(kind, params)?,
        })
    }

    /// Each family takes its fields out of `rest` and parses them; what is left is no
    /// family's.
    pub(super) fn take(rest: &mut Map<String, Value>) -> Result<Self, serde_json::Error> {
        Ok(FamilyConfig {
            nvidia: NvidiaOpaque::take(rest)?,
        })
    }

    /// `later` on top of `self`, as each family merges its part.
    pub(super) fn merge(&mut self, later: FamilyConfig) {
        self.nvidia.merge(later.nvidia);
    }

    /// The sharing settings given, if any, and what they apply to: only a family's setup
    /// can honour them, so a device without one refuses them.
    pub fn asks_sharing(&self) -> Option<Applies> {
        self.nvidia.sharing.as_ref().map(|_| Applies {
            setting: "sharing",
            to: NvidiaOpaque::SHARING_APPLIES_TO,
        })
    }

    /// The devices' optional edits asked for (NVIDIA's driver capabilities, which apply to
    /// its GPUs and MIG devices only); `None` when none are given.
    pub fn optional_edits(&self) -> Option<OptionalEdits> {
        let (item, provider) = NvidiaOpaque::CAPABILITY;
        Some(OptionalEdits {
            names: self.nvidia.optional_edits()?,
            applies: Applies {
                setting: "driverCapabilities",
                to: NvidiaOpaque::CAPABILITIES_APPLY_TO,
            },
            item,
            provider,
        })
    }
}
