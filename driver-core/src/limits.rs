//! The `resource.k8s.io/v1` limits a ResourceSlice must respect, checked before publishing
//! so that a bad device is reported by name instead of failing the whole slice at the API
//! server.

use crate::model::{Attribute, Device};
use graft_record::names::{is_dns_label, is_dns_subdomain};

/// Devices in one ResourceSlice.
pub const MAX_DEVICES_PER_SLICE: usize = 128;
/// Once any device in a slice has taints or consumes counters.
pub const MAX_DEVICES_PER_SLICE_WITH_TAINTS_OR_COUNTERS: usize = 64;
/// Shared counter sets in one ResourceSlice.
pub const MAX_COUNTER_SETS_PER_SLICE: usize = 8;
/// Counters in one counter set.
pub const MAX_COUNTERS_PER_SET: usize = 32;
/// Attributes and capacities of one device, together.
pub const MAX_ATTRIBUTES_AND_CAPACITY: usize = 32;
/// The name part of an attribute or capacity (after the domain).
pub const MAX_ID_LENGTH: usize = 32;
/// The domain part of an attribute or capacity name.
pub const MAX_DOMAIN_LENGTH: usize = 63;
/// Characters of a string or version attribute value.
pub const MAX_ATTRIBUTE_VALUE: usize = 64;

/// What the API server would refuse about a name, an attribute or a device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// A device or counter set name that is not a DNS label.
    #[error("{0:?} is not a DNS label (lowercase letters, digits and '-', at most 63)")]
    NotDnsLabel(String),
    /// The domain part of a qualified name.
    #[error(
        "domain {0:?} is not a DNS subdomain of at most {max} characters", max = MAX_DOMAIN_LENGTH)]
    Domain(String),
    /// The identifier part of a qualified name.
    #[error("{0:?} is not a C identifier of at most {max} characters", max = MAX_ID_LENGTH)]
    Identifier(String),
    /// A string attribute value over the API's length.
    #[error("string value is longer than {max} characters", max = MAX_ATTRIBUTE_VALUE)]
    LongString,
    /// A version attribute that is not semver 2.0.0.
    #[error("{0:?} is not a semantic version (semver 2.0.0)")]
    Version(String),
    /// More attributes and capacities than a device may have.
    #[error(
        "{0} attributes and capacities; at most {max} are allowed", max = MAX_ATTRIBUTES_AND_CAPACITY)]
    TooManyAttributes(usize),
    /// One attribute of a device.
    #[error("attribute {name}: {source}")]
    Attribute {
        /// The attribute's name.
        name: String,
        /// What it breaks.
        #[source]
        source: Box<LimitError>,
    },
    /// One capacity of a device.
    #[error("capacity {name}: {source}")]
    Capacity {
        /// The capacity's name.
        name: String,
        /// What it breaks.
        #[source]
        source: Box<LimitError>,
    },
    /// A counter set name that is not a DNS label.
    #[error("counter set {0:?}: not a DNS label")]
    CounterSetName(String),
    /// More counters in a set than the API allows.
    #[error(
        "counter set {set}: {count} counters; at most {max} are allowed", max = MAX_COUNTERS_PER_SET)]
    TooManyCounters {
        /// The counter set.
        set: String,
        /// How many it holds.
        count: usize,
    },
    /// A counter name that is not a DNS label.
    #[error("counter {counter:?} of set {set}: not a DNS label")]
    CounterName {
        /// The counter set.
        set: String,
        /// The counter.
        counter: String,
    },
    /// A device consumes a counter its set does not hold.
    #[error("consumes counter {counter}, which set {set} does not hold")]
    UnknownCounter {
        /// The counter set.
        set: String,
        /// The counter.
        counter: String,
    },
}

/// A device name must be a DNS label.
pub fn check_device_name(name: &str) -> Result<(), LimitError> {
    if is_dns_label(name) {
        Ok(())
    } else {
        Err(LimitError::NotDnsLabel(name.to_string()))
    }
}

/// The DNS-label form of free text, for names derived from paths: lowercased, each run of
/// other characters one `-`, none at either end (`/dev/net/tun` is `dev-net-tun`,
/// `Seat_01.lic` is `seat-01-lic`). It may still be too long or empty: check it.
pub fn label_from(text: &str) -> String {
    let mut name = String::with_capacity(text.len());
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            name.push(c);
        } else if !name.is_empty() && !name.ends_with('-') {
            name.push('-');
        }
    }
    name.trim_end_matches('-').to_string()
}

fn is_c_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A qualified name: a C identifier of at most 32 characters, optionally prefixed by a
/// DNS subdomain of at most 63 and a `/`.
pub fn check_qualified_name(name: &str) -> Result<(), LimitError> {
    let (domain, id) = match name.split_once('/') {
        Some((d, id)) => (Some(d), id),
        None => (None, name),
    };
    if let Some(d) = domain {
        if d.len() > MAX_DOMAIN_LENGTH || !is_dns_subdomain(d) {
            return Err(LimitError::Domain(d.to_string()));
        }
    }
    if id.len() > MAX_ID_LENGTH || !is_c_identifier(id) {
        return Err(LimitError::Identifier(id.to_string()));
    }
    Ok(())
}

/// An attribute's name and value.
pub fn check_attribute(name: &str, value: &Attribute) -> Result<(), LimitError> {
    check_qualified_name(name)?;
    match value {
        Attribute::String(s) if s.chars().count() > MAX_ATTRIBUTE_VALUE => {
            Err(LimitError::LongString)
        }
        Attribute::Version(v) => {
            if v.len() > MAX_ATTRIBUTE_VALUE || !is_semver(v) {
                Err(LimitError::Version(v.clone()))
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

/// Semver 2.0.0: MAJOR.MINOR.PATCH with optional pre-release and build parts.
fn is_semver(v: &str) -> bool {
    let (core, _build) = v.split_once('+').unwrap_or((v, ""));
    let (core, pre) = match core.split_once('-') {
        Some((_, "")) => return false,
        Some((c, p)) => (c, p),
        None => (core, ""),
    };
    let nums: Vec<&str> = core.split('.').collect();
    let numeric = |s: &str| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    };
    let ident =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    nums.len() == 3
        && nums.iter().all(|n| numeric(n))
        && (pre.is_empty() || pre.split('.').all(ident))
        && v.split_once('+')
            .is_none_or(|(_, b)| b.split('.').all(ident))
}

/// Everything the API server would refuse about one device, in one message.
pub fn check_device(d: &Device) -> Result<(), LimitError> {
    check_device_name(&d.name)?;
    let n = d.attributes.len() + d.capacity.len();
    if n > MAX_ATTRIBUTES_AND_CAPACITY {
        return Err(LimitError::TooManyAttributes(n));
    }
    for (k, v) in &d.attributes {
        check_attribute(k, v).map_err(|e| LimitError::Attribute {
            name: k.clone(),
            source: Box::new(e),
        })?;
    }
    for k in d.capacity.keys() {
        check_qualified_name(k).map_err(|e| LimitError::Capacity {
            name: k.clone(),
            source: Box::new(e),
        })?;
    }
    if let Some(c) = &d.consumes {
        if !is_dns_label(&c.set) {
            return Err(LimitError::CounterSetName(c.set.clone()));
        }
        if c.totals.len() > MAX_COUNTERS_PER_SET {
            return Err(LimitError::TooManyCounters {
                set: c.set.clone(),
                count: c.totals.len(),
            });
        }
        if let Some(k) = c.totals.keys().find(|k| !is_dns_label(k)) {
            return Err(LimitError::CounterName {
                set: c.set.clone(),
                counter: k.clone(),
            });
        }
        if let Some(k) = c.counters.keys().find(|k| !c.totals.contains_key(*k)) {
            return Err(LimitError::UnknownCounter {
                set: c.set.clone(),
                counter: k.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_qualified_name("type").is_ok());
        assert!(check_qualified_name("resource.kubernetes.io/pcieRoot").is_ok());
        assert!(check_qualified_name("a_very_long_identifier_of_33_char").is_err());
        assert!(check_qualified_name("1abc").is_err());
        assert!(check_qualified_name("Bad_Domain/x").is_err());
        assert!(check_device_name("gpu-0").is_ok());
        assert!(check_device_name("-x").is_err());
        assert!(check_device_name(&"a".repeat(64)).is_err());
    }

    #[test]
    fn the_contracts_names_are_names_the_api_takes() {
        // Capacity names follow the attributes' rule in the API.
        for n in graft_api::attributes::ALL
            .iter()
            .chain(graft_api::capacity::ALL)
        {
            assert!(check_qualified_name(n).is_ok(), "{n}");
        }
    }

    #[test]
    fn values() {
        let long = Attribute::String("x".repeat(65));
        assert!(check_attribute("a", &long).is_err());
        for ok in ["1.2.3", "0.0.1-rc.1", "10.20.30+build.5"] {
            assert!(
                check_attribute("v", &Attribute::Version(ok.into())).is_ok(),
                "{ok}"
            );
        }
        for bad in ["1.2", "01.2.3", "1.2.3-", "v1.2.3"] {
            assert!(
                check_attribute("v", &Attribute::Version(bad.into())).is_err(),
                "{bad}"
            );
        }
    }
}
