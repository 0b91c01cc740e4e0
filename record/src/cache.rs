//! Parsed claim records kept between reads, each used again only while the file it came
//! from is provably unchanged.
//!
//! Every lookup looks at the record's path without following a symlink (`lstat`) and
//! compares what it says, file type, device, inode, size, modification and change times,
//! with what `fstat` said of the file the cached copy was parsed from. Anything else (a
//! miss, a symlink, a FIFO, a file gone) takes the full read, which opens the record the
//! way [`crate::read::read_state_file`] does and refuses what it refuses. The store replaces a record by renaming a new file over it (a new
//! inode), and any write in place moves the change time, which no caller can set. So a hit
//! is the file's present content, parsed and validated as before, never an older one.
//!
//! The one gap is the clock's granularity: the kernel stamps change times from a coarse
//! clock (one tick, at most 10 ms), so a write in place within the same tick as the read
//! could keep every field. A copy is therefore kept only once its file is [`SETTLED`] old
//! when read; a later write, in place or as a new file that reuses the inode number, then
//! carries a change time after that read and misses.
//!
//! [`crate::absent::AbsentCache`] keeps the absent-device list by the same rule.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::Result;
use crate::format::ClaimRecord;
use crate::read::{open_state_file, read_capped, SMALL_FILE_CAP};

/// How old a record file must be for its parsed copy to be kept: well above the coarse
/// clock's tick.
pub const SETTLED: Duration = Duration::from_millis(100);
/// Most records kept; past it the cache starts again (a node holds far fewer claims).
pub const MAX_ENTRIES: usize = 8192;

/// What `fstat` says of a record file: device, inode, size, mtime and ctime (s, ns).
pub(crate) type FileKey = (u64, u64, u64, i64, i64, i64, i64);

/// Parsed records by claim UID, with the identity of the file each came from.
#[derive(Debug, Default)]
pub(crate) struct RecordCache {
    map: Mutex<HashMap<String, (FileKey, Arc<ClaimRecord>)>>,
}

impl RecordCache {
    /// Claim `uid`'s record at `path`, `None` when absent; from the cache when the file is
    /// the one its copy was parsed from, else read, parsed and checked by `parse`.
    pub(crate) fn read(
        &self,
        uid: &str,
        path: &Path,
        parse: impl FnOnce(&Path, &[u8]) -> Result<ClaimRecord>,
    ) -> Result<Option<Arc<ClaimRecord>>> {
        if let Ok(m) = std::fs::symlink_metadata(path) {
            if m.file_type().is_file() {
                if let Some((k, rec)) = self.lock().get(uid) {
                    if *k == key_of(&m) {
                        return Ok(Some(rec.clone()));
                    }
                }
            }
        }
        let Some((f, meta)) = open_state_file(path, SMALL_FILE_CAP)? else {
            self.forget(uid);
            return Ok(None);
        };
        let key = key_of(&meta);
        let data = read_capped(&f, &meta, path, SMALL_FILE_CAP)?;
        let parsed = parse(path, &data);
        let mut map = self.lock();
        let rec = match parsed {
            Ok(r) => Arc::new(r),
            Err(e) => {
                map.remove(uid);
                return Err(e);
            }
        };
        if keepable(&f, &key) {
            if map.len() >= MAX_ENTRIES {
                map.clear();
            }
            map.insert(uid.to_string(), (key, rec.clone()));
        } else {
            map.remove(uid);
        }
        Ok(Some(rec))
    }

    fn forget(&self, uid: &str) {
        self.lock().remove(uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (FileKey, Arc<ClaimRecord>)>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// Whether a copy parsed from `f`, whose `fstat` said `key` before the read, may be kept:
/// the file did not change while it was read, and is settled.
pub(crate) fn keepable(f: &File, key: &FileKey) -> bool {
    let same = f.metadata().is_ok_and(|m| key_of(&m) == *key);
    same && settled(key.5, key.6) && settled(key.3, key.4)
}

/// The file's identity and times, from `lstat` or `fstat`.
pub(crate) fn key_of(m: &std::fs::Metadata) -> FileKey {
    (
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    )
}

/// Whether a file time (s, ns since the epoch) is at least [`SETTLED`] before now.
fn settled(s: i64, ns: i64) -> bool {
    let Ok(now) = SystemTime::now().duration_since(UNIX_EPOCH) else {
        return false;
    };
    let (Ok(s), Ok(ns)) = (u64::try_from(s), u32::try_from(ns)) else {
        return false;
    };
    now.checked_sub(Duration::new(s, ns))
        .is_some_and(|age| age >= SETTLED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{File, FileTimes};

    fn parse(path: &Path, data: &[u8]) -> Result<ClaimRecord> {
        crate::stored::parse_record(path, data)
    }

    fn record(uid: &str, node: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({"version": 1,
            "claim": {"uid": uid, "namespace": "ns", "name": "c"},
            "devices": [{"name": "d", "edits": {"device_nodes": [
                {"path": node, "type": "c", "major": 1, "minor": 3}]}}],
            "pods": [{"uid": "p", "containers": [{"name": "app", "devices": ["d"]}]}]}))
        .unwrap()
    }

    fn age(path: &Path) {
        let old = SystemTime::now() - Duration::from_secs(5);
        let f = File::options().write(true).open(path).unwrap();
        f.set_times(FileTimes::new().set_modified(old).set_accessed(old))
            .unwrap();
    }

    #[test]
    fn a_fresh_file_is_not_kept_and_a_write_in_place_misses() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("u.json");
        std::fs::write(&p, record("u", "/dev/null")).unwrap();
        let cache = RecordCache::default();
        cache.read("u", &p, parse).unwrap().unwrap();
        // Its change time is now: not settled, not kept.
        assert_eq!(cache.len(), 0);
        std::thread::sleep(SETTLED + Duration::from_millis(20));
        age(&p);
        std::thread::sleep(SETTLED + Duration::from_millis(20));
        let first = cache.read("u", &p, parse).unwrap().unwrap();
        assert_eq!(cache.len(), 1);
        let again = cache.read("u", &p, parse).unwrap().unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "a settled, unchanged file is a hit"
        );
        // Rewritten in place with the same length and the old times: ctime moved, so a miss.
        std::fs::write(&p, record("u", "/dev/zero")).unwrap();
        age(&p);
        let now = cache.read("u", &p, parse).unwrap().unwrap();
        assert_eq!(now.devices[0].edits.device_nodes[0].path, "/dev/zero");
        // Corrupted in place: the error, never the old copy.
        std::fs::write(&p, b"garbage").unwrap();
        assert!(cache.read("u", &p, parse).is_err());
        assert_eq!(cache.len(), 0);
        // Swapped for a symlink or removed: refused or absent, never the cached copy.
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &p).unwrap();
        assert!(cache.read("u", &p, parse).is_err());
        std::fs::remove_file(&p).unwrap();
        assert!(cache.read("u", &p, parse).unwrap().is_none());
    }
}
