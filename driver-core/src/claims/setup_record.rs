//! The checkpoint's record of what was (or is about to be) done to a device: an opaque,
//! versioned payload owned by the device family that planned it. The core keeps, writes and
//! compares records and sends each to its family by name; it reads only the envelope
//! (`kind`, `family`, `version`), never the payload's own fields.
//!
//! On disk a record is one JSON object with a string `kind`. Records of checkpoint schema 5
//! and older carry no family name ("unnamed"): they belong to the family whose route takes
//! unnamed records, which keeps writing its records so, field for field, so that a driver
//! rolled back onto the node still reads them. Every other family's record carries its
//! `family` and its payload's `version` (checkpoint schema 6).

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

use super::setup_error::SetupError;

/// One device's setup as the checkpoint keeps it, read back after a restart or an upgrade.
///
/// A family with node-side work writes its records with [`Setup::new`], naming itself and
/// its payload's version, reads them back with [`Setup::decode`], and never stops reading a
/// version that a released graft wrote.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Its family's name; `None` for an unnamed record.
    family: Option<String>,
    /// What kind of setup it is, in its family's words.
    kind: String,
    /// The payload's version. A named record keeps it on disk; an unnamed one's is the
    /// checkpoint schema that introduced its fields (its family says which when it writes
    /// it; one read back takes its file's schema, at most 5).
    version: u32,
    /// The whole object as written: its bytes are kept as they were read, so the
    /// checkpoint's checksum over them still holds.
    raw: Box<RawValue>,
}

/// Why a JSON value is not a setup record.
#[derive(Debug, thiserror::Error)]
pub enum NotARecord {
    /// Not an object, or its envelope fields are of the wrong type.
    #[error("a device's setup record is not one: {0}")]
    Json(#[source] serde_json::Error),
    /// An object without a `kind`.
    #[error("a device's setup record has no kind")]
    NoKind,
}

/// The envelope every record has.
#[derive(Deserialize)]
struct Envelope {
    kind: Option<String>,
    #[serde(default)]
    family: Option<String>,
    #[serde(default)]
    version: Option<u32>,
}

impl Setup {
    /// A record of `payload`, which must serialize to a JSON object with a string `kind`;
    /// `family` is written into it unless `None` (unnamed), with `version`.
    pub fn new<T: Serialize>(
        family: Option<&str>,
        version: u32,
        payload: &T,
    ) -> Result<Setup, SetupError> {
        let unwritable = |reason: String| SetupError::Unwritable {
            family: family.unwrap_or("unnamed").to_string(),
            reason,
        };
        let raw = match family {
            None => serde_json::value::to_raw_value(payload),
            Some(name) => match serde_json::to_value(payload) {
                Ok(serde_json::Value::Object(mut fields)) => {
                    fields.insert("family".into(), name.into());
                    fields.insert("version".into(), version.into());
                    serde_json::value::to_raw_value(&fields)
                }
                Ok(_) => return Err(unwritable("its payload is not a JSON object".into())),
                Err(e) => Err(e),
            },
        }
        .map_err(|e| unwritable(e.to_string()))?;
        let mut setup = Setup::from_raw(raw).map_err(|e| unwritable(e.to_string()))?;
        setup.version = version;
        Ok(setup)
    }

    /// The record of `raw`, from its envelope; why not, when it has no `kind`.
    fn from_raw(raw: Box<RawValue>) -> Result<Setup, NotARecord> {
        let envelope: Envelope = serde_json::from_str(raw.get()).map_err(NotARecord::Json)?;
        let kind = envelope.kind.ok_or(NotARecord::NoKind)?;
        Ok(Setup {
            version: match envelope.family {
                Some(_) => envelope.version.unwrap_or(1),
                None => 0,
            },
            family: envelope.family,
            kind,
            raw,
        })
    }

    /// Its family's name; `None` for an unnamed record.
    pub fn family(&self) -> Option<&str> {
        self.family.as_deref()
    }

    /// Its kind, in its family's words.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// Its payload's version (see the field).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The payload as its family's type: `family` names the reader in the error, which
    /// says what was wrong.
    pub fn decode<T: DeserializeOwned>(&self, family: &str) -> Result<T, SetupError> {
        serde_json::from_str(self.raw.get()).map_err(|e| SetupError::Unreadable {
            family: family.to_string(),
            kind: self.kind.clone(),
            reason: e.to_string(),
        })
    }

    /// An unnamed record read from a file of checkpoint schema `schema`: its fields are
    /// that schema's, or an older one's.
    pub(crate) fn read_in(&mut self, schema: u32, last_unnamed: u32) {
        if self.family.is_none() {
            self.version = schema.min(last_unnamed);
        }
    }
}

/// Records are equal when they say the same: the same family, kind and payload, whatever
/// the order of its fields (the version an unnamed record was read at is not what it says).
impl PartialEq for Setup {
    fn eq(&self, other: &Self) -> bool {
        let value = |s: &Setup| serde_json::from_str::<serde_json::Value>(s.raw.get()).ok();
        self.family == other.family
            && self.kind == other.kind
            && (self.raw.get() == other.raw.get() || value(self) == value(other))
    }
}

impl Eq for Setup {}

impl Serialize for Setup {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

/// Only a record without a `kind` fails here, and with it the whole checkpoint file; a
/// payload its family cannot read fails only its claim's unprepare.
impl<'de> Deserialize<'de> for Setup {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        Setup::from_raw(raw).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_unnamed_record_is_written_as_its_payload() {
        let payload = json!({"kind": "widget", "slot": 3});
        let s = Setup::new(None, 2, &payload).unwrap();
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"kind":"widget","slot":3}"#
        );
        assert_eq!((s.family(), s.kind(), s.version()), (None, "widget", 2));
        let back: Setup = serde_json::from_str(r#"{"kind":"widget","slot":3}"#).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.version(), 0);
    }

    #[test]
    fn a_named_record_carries_its_family_and_version() {
        let s = Setup::new(Some("acme"), 4, &json!({"kind": "widget", "slot": 3})).unwrap();
        let text = serde_json::to_string(&s).unwrap();
        let back: Setup = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (back.family(), back.kind(), back.version()),
            (Some("acme"), "widget", 4)
        );
        assert_eq!(back, s);
        #[derive(Deserialize)]
        struct Widget {
            slot: u32,
        }
        assert_eq!(back.decode::<Widget>("acme").unwrap().slot, 3);
        // Another family's, or the same kind with other fields, is another record.
        let other = Setup::new(Some("other"), 4, &json!({"kind": "widget", "slot": 3})).unwrap();
        assert_ne!(other, s);
        let moved = Setup::new(Some("acme"), 4, &json!({"kind": "widget", "slot": 4})).unwrap();
        assert_ne!(moved, s);
    }

    #[test]
    fn a_record_without_a_kind_is_not_one() {
        for text in [r#"{"slot":3}"#, r#"{"kind":7}"#, r#""vfio""#] {
            let e = serde_json::from_str::<Setup>(text).unwrap_err();
            assert!(e.to_string().contains("setup record"), "{text}: {e}");
        }
        let e = Setup::new(None, 1, &json!({"slot": 3})).unwrap_err();
        assert!(e.to_string().contains("has no kind"), "{e}");
        let e = Setup::new(Some("acme"), 1, &json!(["kind"])).unwrap_err();
        assert!(e.to_string().contains("not a JSON object"), "{e}");
    }

    #[test]
    fn a_payload_its_family_cannot_read_says_what_was_wrong() {
        let s: Setup = serde_json::from_str(r#"{"kind":"widget","slot":"three"}"#).unwrap();
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Widget {
            slot: u32,
        }
        let e = s.decode::<Widget>("acme").unwrap_err();
        assert!(matches!(e, SetupError::Unreadable { .. }), "{e}");
        let text = e.to_string();
        assert!(text.contains("acme") && text.contains("widget"), "{text}");
        assert!(text.contains("invalid type"), "{text}");
    }
}
