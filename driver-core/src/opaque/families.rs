//! The families' parts of the opaque `DeviceConfig`. A family with fields or kinds of its
//! own registers an [`OpaqueFamily`] (the families' registry, graft-driver's `families::opaque`,
//! lists them; the core is given them with `Core::with_opaque`). Each parses its part into a
//! [`FamilyPart`], which merges and answers the core's questions in the family's words.
//! The generic part ([`super`]) calls only what is below and names no family.

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

use serde_json::{Map, Value};

/// Why a configuration of a family's own kind is refused, as that family says.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct FamilyKindError(pub Box<dyn std::error::Error + Send + Sync>);

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

/// A family's parser of its part of the configuration.
pub trait OpaqueFamily: Debug + Send + Sync {
    /// The parameters' fields it owns, as users spell them.
    fn fields(&self) -> &'static [&'static str];
    /// The kinds of configuration besides `DeviceConfig` it owns.
    fn kinds(&self) -> &'static [&'static str];
    /// Takes its fields out of `rest` (the fields the generic part does not know) and
    /// parses them; `None` when none of them is there.
    fn take(
        &self,
        rest: &mut Map<String, Value>,
    ) -> Result<Option<Box<dyn FamilyPart>>, serde_json::Error>;
    /// A configuration of one of its [`kinds`](Self::kinds).
    fn of_kind(&self, kind: &str, params: &Value) -> Result<Box<dyn FamilyPart>, FamilyKindError>;
}

/// One family's part of one configuration. Parts of the same type are the same family's.
pub trait FamilyPart: Any + Debug + Send + Sync {
    /// `later` (a part of the same type) on top of `self`, as the family merges.
    fn merge(&mut self, later: &dyn FamilyPart);
    /// The sharing settings given, if any, and what they apply to: only a family's setup
    /// can honour them, so a device without one refuses them.
    fn asks_sharing(&self) -> Option<Applies> {
        None
    }
    /// The devices' optional edits asked for; `None` when none are given.
    fn optional_edits(&self) -> Option<OptionalEdits> {
        None
    }
    /// A boxed copy.
    fn clone_part(&self) -> Box<dyn FamilyPart>;
    /// Whether `other` is the same part.
    fn same(&self, other: &dyn FamilyPart) -> bool;
    /// Itself, for a family's typed read ([`FamilyConfig::part`]).
    fn as_any(&self) -> &dyn Any;
}

/// The families registered for the opaque configuration.
#[derive(Debug, Clone, Default)]
pub struct OpaqueFamilies {
    families: Vec<Arc<dyn OpaqueFamily>>,
}

impl OpaqueFamilies {
    /// The families given, in the order their fields are listed.
    pub fn new(families: Vec<Arc<dyn OpaqueFamily>>) -> Self {
        OpaqueFamilies { families }
    }

    /// The fields the families own, as users spell them.
    pub fn fields(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.families
            .iter()
            .flat_map(|f| f.fields().iter().copied())
    }

    /// The kinds of configuration besides `DeviceConfig` that a family owns.
    pub fn kinds(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.families.iter().flat_map(|f| f.kinds().iter().copied())
    }

    /// A configuration of a family's own kind (one of [`Self::kinds`]).
    pub(super) fn of_kind(
        &self,
        kind: &str,
        params: &Value,
    ) -> Result<FamilyConfig, FamilyKindError> {
        let mut parts = Vec::new();
        if let Some(f) = self.families.iter().find(|f| f.kinds().contains(&kind)) {
            parts.push(f.of_kind(kind, params)?);
        }
        Ok(FamilyConfig { parts })
    }

    /// Each family takes its fields out of `rest` and parses them; what is left is no
    /// family's.
    pub(super) fn take(
        &self,
        rest: &mut Map<String, Value>,
    ) -> Result<FamilyConfig, serde_json::Error> {
        let mut parts = Vec::new();
        for f in &self.families {
            parts.extend(f.take(rest)?);
        }
        Ok(FamilyConfig { parts })
    }
}

/// Every family's part of one configuration (only the families that were given one).
#[derive(Debug, Default)]
pub struct FamilyConfig {
    parts: Vec<Box<dyn FamilyPart>>,
}

impl Clone for FamilyConfig {
    fn clone(&self) -> Self {
        FamilyConfig {
            parts: self.parts.iter().map(|p| p.clone_part()).collect(),
        }
    }
}

impl PartialEq for FamilyConfig {
    fn eq(&self, other: &Self) -> bool {
        self.parts.len() == other.parts.len()
            && self
                .parts
                .iter()
                .all(|p| other.parts.iter().any(|o| p.same(o.as_ref())))
    }
}

impl Eq for FamilyConfig {}

impl FamilyConfig {
    /// A configuration of these parts (one per family).
    pub fn of(parts: Vec<Box<dyn FamilyPart>>) -> Self {
        FamilyConfig { parts }
    }

    /// The part of type `T`, read by its family.
    pub fn part<T: FamilyPart>(&self) -> Option<&T> {
        self.parts
            .iter()
            .find_map(|p| p.as_any().downcast_ref::<T>())
    }

    /// `later` on top of `self`, as each family merges its part.
    pub(super) fn merge(&mut self, later: FamilyConfig) {
        for p in later.parts {
            let same_family =
                |m: &&mut Box<dyn FamilyPart>| m.as_any().type_id() == p.as_any().type_id();
            match self.parts.iter_mut().find(same_family) {
                Some(mine) => mine.merge(p.as_ref()),
                None => self.parts.push(p),
            }
        }
    }

    /// The sharing settings given, if any, and what they apply to.
    pub fn asks_sharing(&self) -> Option<Applies> {
        self.parts.iter().find_map(|p| p.asks_sharing())
    }

    /// The devices' optional edits asked for (NVIDIA's driver capabilities, which apply to
    /// its GPUs and MIG devices only); `None` when none are given.
    pub fn optional_edits(&self) -> Option<OptionalEdits> {
        self.parts.iter().find_map(|p| p.optional_edits())
    }
}
