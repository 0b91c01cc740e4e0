//! Why an entry of devices.toml is refused.

use crate::limits::LimitError;

/// Why one `[[devices]]` or `[[files]]` entry is refused; the loader adds the file and the
/// entry's place to it.
#[derive(Debug, thiserror::Error)]
pub enum InvalidEntry {
    /// A field's value breaks a rule of the config itself.
    #[error("{0}")]
    Field(String),
    /// A name or attribute the API server would refuse.
    #[error("{field}: {source}")]
    Limit {
        /// The field.
        field: String,
        /// The limit it breaks.
        #[source]
        source: LimitError,
    },
    /// An environment variable the injection policy would refuse.
    #[error(transparent)]
    Env(#[from] graft_record::InvalidRecord),
    /// A glob that does not parse.
    #[error("pattern: {0}")]
    Pattern(#[from] glob::PatternError),
}

impl InvalidEntry {
    /// A field's value refused by the config's own rules.
    pub fn field(reason: impl Into<String>) -> Self {
        InvalidEntry::Field(reason.into())
    }

    /// `field`'s name or attribute refused by the API's limits.
    pub fn limit(field: impl Into<String>) -> impl FnOnce(LimitError) -> Self {
        let field = field.into();
        move |source| InvalidEntry::Limit { field, source }
    }
}
