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

    /// Whether sharing settings are given: only a family's setup can honour them, so a
    /// device without one refuses them.
    pub fn asks_sharing(&self) -> bool {
        self.nvidia.sharing.is_some()
    }

    /// The names of the devices' optional edits asked for (NVIDIA's driver capabilities,
    /// which apply to its GPUs and MIG devices only); `None` when none are given.
    pub fn optional_edits(&self) -> Option<Vec<&'static str>> {
        self.nvidia.optional_edits()
    }
}
