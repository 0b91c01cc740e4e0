//! Attribute values as devices.toml writes them.

use serde::Deserialize;

use crate::model::Attribute;

/// An attribute value as the config writes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ConfigAttribute {
    Bool(bool),
    Int(i64),
    String(String),
    Version { version: String },
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
