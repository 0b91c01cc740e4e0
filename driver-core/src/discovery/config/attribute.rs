//! Attribute values as devices.toml writes them.

use serde::Deserialize;

use crate::model::Attribute;

/// An attribute value as the config writes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ConfigAttribute {
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A string.
    String(String),
    /// A semantic version, written `{ version = "1.2.3" }`.
    Version {
        /// The version, semver 2.0.0.
        version: String,
    },
}

impl From<&ConfigAttribute> for Attribute {
    fn from(a: &ConfigAttribute) -> Self {
        match a {
            ConfigAttribute::Bool(b) => Attribute::Bool(*b),
            ConfigAttribute::Int(i) => Attribute::Int(*i),
            ConfigAttribute::String(s) => Attribute::String(s.clone()),
            ConfigAttribute::Version { version } => Attribute::Version(version.clone()),
        }
    }
}
