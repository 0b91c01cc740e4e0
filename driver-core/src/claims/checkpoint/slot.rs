//! One slot file: its on-disk form, its schema version and checksum, and the checks a read
//! makes.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::entry::ClaimEntry;
#[cfg(doc)]
use crate::claims::setup_port::Setup;
use crate::error::{DriverError, Result};

/// The newest schema this driver reads and writes. Version 2 added MIG instance and MPS
/// share setups; version 3 a VFIO setup's IOMMU group peers and persistence mode, which an
/// older driver would not put back; version 4 a ComputeDomain channel's setup; version 5 the
/// channel's number, clique and mode, and an IMEX daemon place's domain; version 6 setup
/// records that name their family (and their payload's version), which an older driver would
/// take for the unnamed records' family. A file is written as the oldest version that holds
/// its claims, so that an older driver rolled back onto the node still reads it when it can.
pub const CHECKPOINT_VERSION: u32 = 6;
/// The last schema whose setup records all were unnamed (see [`Setup`]).
pub const LAST_UNNAMED: u32 = 5;
pub const OLDEST_VERSION: u32 = 1;
/// Why a slot file is not a usable checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum BadSlot {
    /// Not JSON of the checkpoint's form (a torn write).
    #[error("not a checkpoint: {0}")]
    NotACheckpoint(#[source] serde_json::Error),
    /// A schema this driver does not know.
    #[error(
        "schema version {0} (this driver knows {oldest} to {newest})",
        oldest = OLDEST_VERSION,
        newest = CHECKPOINT_VERSION
    )]
    Version(u32),
    /// The claims do not match their checksum.
    #[error("checksum mismatch")]
    Checksum,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OnDisk {
    pub version: u32,
    pub seq: u64,
    pub boot_id: String,
    pub checksum: String,
    pub claims: BTreeMap<String, ClaimEntry>,
}

/// The oldest schema that holds `claims`: 6 for a record that names its family; for an
/// unnamed one, the schema that introduced its fields, as its family said when it wrote it
/// (or the schema it was read at, at most 5).
pub fn needed_version(claims: &BTreeMap<String, ClaimEntry>) -> u32 {
    claims
        .values()
        .flat_map(|e| &e.devices)
        .flat_map(|d| &d.setup)
        .map(|s| match (s.family(), s.version()) {
            (Some(_), _) => LAST_UNNAMED + 1,
            (None, 0) => LAST_UNNAMED,
            (None, v) => v.min(LAST_UNNAMED),
        })
        .fold(OLDEST_VERSION, u32::max)
}

/// Over the claims' JSON encoding.
pub fn checksum(claims: &BTreeMap<String, ClaimEntry>) -> String {
    // BTreeMap and struct field order make the encoding deterministic.
    let bytes = serde_json::to_vec(claims).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// When this boot began, from `btime` in /proc/stat.
pub fn boot_time() -> Option<std::time::SystemTime> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let secs: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(secs))
}

/// One slot file: `None` when absent, its checks' verdict otherwise.
pub fn read_slot(path: &Path) -> Result<Option<std::result::Result<OnDisk, BadSlot>>> {
    let data = match std::fs::read(path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(DriverError::io("read", path, e)),
    };
    Ok(Some(match serde_json::from_slice::<OnDisk>(&data) {
        Err(e) => Err(BadSlot::NotACheckpoint(e)),
        Ok(f) if !(OLDEST_VERSION..=CHECKPOINT_VERSION).contains(&f.version) => {
            Err(BadSlot::Version(f.version))
        }
        Ok(f) if f.checksum != checksum(&f.claims) => Err(BadSlot::Checksum),
        Ok(mut f) => {
            let schema = f.version;
            f.claims
                .values_mut()
                .flat_map(|e| &mut e.devices)
                .flat_map(|d| &mut d.setup)
                .for_each(|s| s.read_in(schema, LAST_UNNAMED));
            Ok(f)
        }
    }))
}
