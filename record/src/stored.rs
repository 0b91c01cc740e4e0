//! Record files as stored: reading one, listing them, and parsing one with the checks the
//! store applies (version, validation, filed under its own claim's uid).

use std::path::Path;

use serde::Deserialize;

use crate::error::{RecordError, Result};
use crate::format::{ClaimRecord, OLDEST_RECORD_VERSION, RECORD_VERSION};
use crate::validate::{check_id, validate_record};

/// Reads and checks one record file. `Ok(None)` when it does not exist. Read as one
/// trusting nothing there would ([`crate::read::read_state_file`]): never through a
/// symlink, only a regular file (a FIFO is refused, never waited on), at most
/// [`crate::read::SMALL_FILE_CAP`] bytes.
pub(crate) fn read_record(path: &Path) -> Result<Option<ClaimRecord>> {
    match crate::read::read_state_file(path, crate::read::SMALL_FILE_CAP)? {
        Some(data) => parse_stored(path, &data).map(Some),
        None => Ok(None),
    }
}

/// Reads claim `uid`'s record below state directory `root` without writing anything, as
/// one trusting nothing there would: no symlink, a size cap (graftctl). `None` if absent.
pub fn read_claim_file(root: &Path, uid: &str) -> Result<Option<ClaimRecord>> {
    check_id("claim uid", uid).map_err(|source| RecordError::Rejected {
        claim: uid.to_string(),
        source,
    })?;
    read_record(&root.join("claims").join(format!("{uid}.json")))
}

/// UIDs of the claim records below state directory `root`, sorted, without writing.
pub fn claim_file_uids(root: &Path) -> Result<Vec<String>> {
    Ok(crate::read::list_names(&root.join("claims"))?
        .into_iter()
        .filter_map(|n| n.strip_suffix(".json").map(str::to_string))
        .collect())
}

pub(crate) fn parse_stored(path: &Path, data: &[u8]) -> Result<ClaimRecord> {
    let rec = parse_record(path, data)?;
    // A record lives under its claim's UID: one named otherwise was not put there by the
    // store, and would shadow or duplicate another claim.
    let stem = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(".json"));
    if stem != Some(rec.claim.uid.as_str()) {
        return Err(RecordError::Invalid {
            path: path.to_path_buf(),
            claim: rec.claim.to_string(),
            source: crate::InvalidRecord {
                field: "claim.uid".into(),
                reason: format!(
                    "the record is stored under another claim's name (expected {}.json)",
                    rec.claim.uid
                ),
            },
        });
    }
    Ok(rec)
}

/// Whether this build reads records of version `v`: every version from the oldest a
/// release wrote, so that records left by the previous release still work after an
/// upgrade.
fn known_version(v: u64) -> bool {
    (u64::from(OLDEST_RECORD_VERSION)..=u64::from(RECORD_VERSION)).contains(&v)
}

/// Parses record bytes, telling a record of another version apart from a corrupt one.
pub fn parse_record(path: &Path, data: &[u8]) -> Result<ClaimRecord> {
    #[derive(Deserialize)]
    struct VersionOnly {
        version: Option<serde_json::Value>,
    }
    let rec: ClaimRecord = match serde_json::from_slice(data) {
        Ok(r) => r,
        Err(e) => {
            // Only on failure: a record of a newer shape is reported as such.
            if let Ok(VersionOnly { version: Some(v) }) = serde_json::from_slice(data) {
                if let Some(n) = v.as_u64() {
                    if !known_version(n) {
                        return Err(RecordError::UnknownVersion {
                            path: path.to_path_buf(),
                            version: n,
                            supported: RECORD_VERSION,
                        });
                    }
                }
            }
            return Err(RecordError::Corrupt {
                path: path.to_path_buf(),
                reason: e.to_string(),
            });
        }
    };
    if !known_version(rec.version.into()) {
        return Err(RecordError::UnknownVersion {
            path: path.to_path_buf(),
            version: rec.version as u64,
            supported: RECORD_VERSION,
        });
    }
    validate_record(&rec).map_err(|source| RecordError::Invalid {
        path: path.to_path_buf(),
        claim: rec.claim.to_string(),
        source,
    })?;
    Ok(rec)
}
