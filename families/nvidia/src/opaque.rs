//! NVIDIA's part of graft's opaque `DeviceConfig` (the generic part is [`graft_driver_core::opaque`]):
//!
//! ```yaml
//! sharing: {strategy: TimeSlicing, timeSlicing: {interval: Long}}
//! driverCapabilities: [graphics, video]
//! ```
//!
//! Its fields sit at the top level of the parameters, beside the generic ones; the
//! generic parse hands over the fields it does not know, and this part takes its own.

use std::any::Any;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::domain::config::DomainConfigError;
use super::domain::DomainConfig;
use super::driver_files::Capability;
use graft_driver_core::opaque::{
    Applies, FamilyKindError, FamilyPart, OpaqueFamily, OptionalEdits,
};

/// NVIDIA's parser of its part, as the families' registry lists it.
#[derive(Debug, Clone, Copy, Default)]
pub struct NvidiaOpaqueFamily;

impl OpaqueFamily for NvidiaOpaqueFamily {
    fn fields(&self) -> &'static [&'static str] {
        NvidiaOpaque::FIELDS
    }

    fn kinds(&self) -> &'static [&'static str] {
        DomainConfig::KINDS
    }

    fn take(
        &self,
        rest: &mut Map<String, Value>,
    ) -> Result<Option<Box<dyn FamilyPart>>, serde_json::Error> {
        let part = NvidiaOpaque::take(rest)?;
        // An empty part is none: configurations compare as if it were not there.
        Ok((part != NvidiaOpaque::default()).then(|| Box::new(part) as Box<dyn FamilyPart>))
    }

    fn of_kind(&self, kind: &str, params: &Value) -> Result<Box<dyn FamilyPart>, FamilyKindError> {
        NvidiaOpaque::of_kind(kind, params)
            .map(|p| Box::new(p) as Box<dyn FamilyPart>)
            .map_err(|e| FamilyKindError(Box::new(e)))
    }
}

impl FamilyPart for NvidiaOpaque {
    fn merge(&mut self, later: &dyn FamilyPart) {
        if let Some(later) = later.as_any().downcast_ref::<NvidiaOpaque>() {
            NvidiaOpaque::merge(self, later.clone());
        }
    }

    fn asks_sharing(&self) -> Option<Applies> {
        self.sharing.as_ref().map(|_| Applies {
            setting: "sharing",
            to: Self::SHARING_APPLIES_TO,
        })
    }

    fn optional_edits(&self) -> Option<OptionalEdits> {
        let (item, provider) = Self::CAPABILITY;
        Some(OptionalEdits {
            names: NvidiaOpaque::optional_edits(self)?,
            applies: Applies {
                setting: "driverCapabilities",
                to: Self::CAPABILITIES_APPLY_TO,
            },
            item,
            provider,
        })
    }

    fn clone_part(&self) -> Box<dyn FamilyPart> {
        Box::new(self.clone())
    }

    fn same(&self, other: &dyn FamilyPart) -> bool {
        other.as_any().downcast_ref::<NvidiaOpaque>() == Some(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// NVIDIA's fields of a `DeviceConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NvidiaOpaque {
    /// GPU sharing (full NVIDIA GPUs only).
    pub sharing: Option<Sharing>,
    /// NVIDIA driver capabilities beyond the default `compute` and `utility` (GPU and MIG
    /// devices only): `graphics`, `video`, `display`, each adding exactly its files.
    pub driver_capabilities: Option<Vec<Capability>>,
    /// The ComputeDomain the claim's IMEX devices belong to: from a configuration of its
    /// own kind ([`DomainConfig::KINDS`]), never a `DeviceConfig` field.
    #[serde(skip)]
    pub compute_domain: Option<DomainConfig>,
}

impl NvidiaOpaque {
    /// The parameters' fields this part owns, as users spell them.
    pub const FIELDS: &'static [&'static str] = &["sharing", "driverCapabilities"];
    /// What `sharing` applies to, for the core's refusal of it elsewhere.
    pub const SHARING_APPLIES_TO: &'static str = "full NVIDIA GPUs";
    /// What `driverCapabilities` applies to, for the core's refusal of it elsewhere.
    pub const CAPABILITIES_APPLY_TO: &'static str = "NVIDIA GPUs and MIG devices";
    /// What one of `driverCapabilities` is called, and what provides its files.
    pub const CAPABILITY: (&'static str, &'static str) =
        ("driver capability", "the node's NVIDIA driver");

    /// Takes this part's fields out of `rest` (the parameters' fields the generic part does
    /// not know) and parses them.
    pub fn take(rest: &mut Map<String, Value>) -> Result<Self, serde_json::Error> {
        let own: Map<String, Value> = Self::FIELDS
            .iter()
            .filter_map(|f| rest.remove(*f).map(|v| (f.to_string(), v)))
            .collect();
        if own.is_empty() {
            return Ok(Self::default());
        }
        serde_json::from_value(Value::Object(own))
    }

    /// `later` on top of `self`, each field as a whole.
    pub fn merge(&mut self, later: NvidiaOpaque) {
        if later.sharing.is_some() {
            self.sharing = later.sharing;
        }
        if later.driver_capabilities.is_some() {
            self.driver_capabilities = later.driver_capabilities;
        }
        if later.compute_domain.is_some() {
            self.compute_domain = later.compute_domain;
        }
    }

    /// A configuration of one of NVIDIA's own kinds (a ComputeDomain's).
    pub fn of_kind(kind: &str, params: &Value) -> Result<Self, DomainConfigError> {
        Ok(NvidiaOpaque {
            compute_domain: Some(DomainConfig::parse(kind, params)?),
            ..Default::default()
        })
    }

    /// The names of the devices' optional edits the capabilities ask for (the defaults
    /// need none); `None` when no capabilities are given.
    pub fn optional_edits(&self) -> Option<Vec<&'static str>> {
        let caps = self.driver_capabilities.as_ref()?;
        Some(
            caps.iter()
                .filter(|c| !c.is_default())
                .map(|c| c.name())
                .collect(),
        )
    }
}

/// ```yaml
/// sharing: {strategy: TimeSlicing, timeSlicing: {interval: Long}}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Sharing {
    /// How the GPU is shared.
    pub strategy: SharingStrategy,
    /// Time-slicing settings; defaults when absent.
    pub time_slicing: Option<TimeSlicing>,
}

/// Only time-slicing; MPS is not supported, and says so through serde's list of variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum SharingStrategy {
    /// Every claim's containers run on the GPU in turns.
    TimeSlicing,
}

/// Time-slicing settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TimeSlicing {
    /// How long each turn is.
    #[serde(default)]
    pub interval: TimeSliceInterval,
}

/// The GPU's compute time slice, as nvidia-smi names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum TimeSliceInterval {
    /// The driver's default.
    #[default]
    Default,
    /// The shortest.
    Short,
    /// Between short and long.
    Medium,
    /// The longest.
    Long,
}

impl TimeSliceInterval {
    /// nvidia-smi's `--set-timeslice` value.
    pub fn smi_value(self) -> u32 {
        match self {
            TimeSliceInterval::Default => 0,
            TimeSliceInterval::Short => 1,
            TimeSliceInterval::Medium => 2,
            TimeSliceInterval::Long => 3,
        }
    }
}

impl Sharing {
    /// The time slice asked for; the default when none is.
    pub fn interval(&self) -> TimeSliceInterval {
        self.time_slicing
            .as_ref()
            .map(|t| t.interval)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_exactly_its_fields() {
        let mut rest: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "sharing": {"strategy": "TimeSlicing", "timeSlicing": {"interval": "Long"}},
            "driverCapabilities": ["compute", "video"],
            "colour": "red"
        }))
        .unwrap();
        let got = NvidiaOpaque::take(&mut rest).unwrap();
        assert_eq!(
            got.sharing.as_ref().map(Sharing::interval),
            Some(TimeSliceInterval::Long)
        );
        assert_eq!(got.optional_edits(), Some(vec!["video"]));
        // Every field FIELDS names is one the struct parses, and the rest stays.
        assert_eq!(rest.keys().collect::<Vec<_>>(), ["colour"]);
        assert_eq!(
            NvidiaOpaque::take(&mut Map::new()).unwrap(),
            NvidiaOpaque::default()
        );
    }
}
