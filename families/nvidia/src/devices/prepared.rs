//! The driver's prepared directory (the naming rule is `graft_record::driver_dir`'s): a
//! copy of the files every GPU container gets, one directory per driver version and file
//! set, bound read-only into each GPU container as one mount instead of one per file.
//!
//! - The key is the version and a hash of each file's usual path, size, modification time
//!   and mode: a driver reinstalled in place, or a file found differently, gets a new
//!   directory, and an existing one is never rewritten.
//! - Built in a staging directory (`.staging-*`, which no record may mount), each copy
//!   synced, then renamed into place and the parent synced: a directory under its key is
//!   complete. Staging left by a crash is removed by the next build.
//! - Copied, not hard-linked: the driver root and the state directory are separate mounts
//!   in graft-driver's container, and a link cannot cross mounts.
//! - Older keys are kept: a running container's bind holds its directory, and removing
//!   its files would take them from under it.

use std::fs::{self, File, Permissions};
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use graft_record::driver_dir;

use crate::driver_files::{Capability, DriverFiles, Roots};

/// A prepared directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// Its path, the bind's source (the state directory has one path on the host and in
    /// graft-driver's container).
    pub path: PathBuf,
    /// The usual container path of each file in it.
    pub files: Vec<String>,
}

/// One file to copy: where this process reads it, its usual container path.
struct Entry {
    source: PathBuf,
    file: String,
}

/// The files of the default capabilities and the GSP firmware, as graft would mount them.
fn entries(roots: &Roots, files: &DriverFiles) -> Vec<Entry> {
    let mut out: Vec<Entry> = Capability::DEFAULT
        .iter()
        .flat_map(|&cap| files.files_of(cap))
        .map(|f| Entry {
            source: roots.driver_visible(&f.path),
            file: f.destination.clone(),
        })
        .collect();
    out.extend(files.firmware.iter().map(|p| Entry {
        source: roots.driver_visible(p),
        file: p.clone(),
    }));
    out
}

/// FNV-1a, 64 bits: stable across builds, unlike std's hasher.
fn fnv(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

fn context(what: String) -> impl FnOnce(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// The directory for `files` below `base` (`<state>/nvidia/driver`), built when missing.
pub fn prepare(roots: &Roots, files: &DriverFiles, base: &Path) -> io::Result<Prepared> {
    let entries = entries(roots, files);
    let mut h = 0xcbf2_9ce4_8422_2325;
    for e in &entries {
        let m =
            fs::symlink_metadata(&e.source).map_err(context(format!("{}", e.source.display())))?;
        if !m.is_file() {
            return Err(io::Error::other(format!(
                "{} is not a regular file",
                e.source.display()
            )));
        }
        for part in [
            e.file.as_bytes(),
            &m.size().to_le_bytes(),
            &m.mtime().to_le_bytes(),
            &m.mtime_nsec().to_le_bytes(),
            &m.mode().to_le_bytes(),
        ] {
            h = fnv(fnv(h, part), b"\0");
        }
    }
    let key = format!("{}-{h:016x}", files.version);
    if !driver_dir::is_key(&key) {
        return Err(io::Error::other(format!(
            "driver version {:?} cannot name a directory",
            files.version
        )));
    }
    let path = base.join(&key);
    let prepared = Prepared {
        files: entries.iter().map(|e| e.file.clone()).collect(),
        path: path.clone(),
    };
    if fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
        return Ok(prepared);
    }
    fs::create_dir_all(base).map_err(context(format!("creating {}", base.display())))?;
    remove_staging(base);
    let staging = base.join(format!(".staging-{key}-{}", next()));
    let built = build(&staging, &entries).and_then(|()| {
        match fs::rename(&staging, &path) {
            Ok(()) => Ok(()),
            // Another build finished first: the same key, the same files.
            Err(_) if path.is_dir() => fs::remove_dir_all(&staging),
            Err(e) => Err(e),
        }
    });
    if let Err(e) = built {
        let _ = fs::remove_dir_all(&staging);
        return Err(context(format!("preparing {}", path.display()))(e));
    }
    File::open(base)?.sync_all()?;
    tracing::info!(
        path = %path.display(),
        files = entries.len(),
        "prepared the driver's files for GPU containers"
    );
    Ok(prepared)
}

/// A staging name no other build in this process uses.
fn next() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Staging directories a crash left behind.
fn remove_staging(base: &Path) {
    let Ok(dir) = fs::read_dir(base) else {
        return;
    };
    for e in dir.flatten() {
        if e.file_name().to_string_lossy().starts_with(".staging-") {
            if let Err(err) = fs::remove_dir_all(e.path()) {
                tracing::warn!(path = %e.path().display(), error = %err, "cannot remove a staging directory");
            }
        }
    }
}

fn build(staging: &Path, entries: &[Entry]) -> io::Result<()> {
    fs::create_dir(staging)?;
    fs::set_permissions(staging, Permissions::from_mode(0o755))?;
    let mut dirs = vec![staging.to_path_buf()];
    for e in entries {
        let to = staging.join(e.file.trim_start_matches('/'));
        if let Some(parent) = to.parent() {
            mkdirs(staging, parent, &mut dirs)?;
        }
        fs::copy(&e.source, &to).map_err(context(format!("copying {}", e.source.display())))?;
        // Readable by every container's user; executable where the driver's file is;
        // never setuid, nor writable by anyone but root.
        let mode = fs::metadata(&e.source)?.mode();
        fs::set_permissions(&to, Permissions::from_mode(0o644 | (mode & 0o111)))?;
        File::open(&to)?.sync_all()?;
    }
    // Their entries too, before the rename makes the directory count as complete.
    for d in dirs.iter().rev() {
        File::open(d)?.sync_all()?;
    }
    Ok(())
}

/// `mkdir -p` below `staging`, each new directory 0755 whatever the umask and added to
/// `made`.
fn mkdirs(staging: &Path, dir: &Path, made: &mut Vec<PathBuf>) -> io::Result<()> {
    if dir == staging || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        mkdirs(staging, parent, made)?;
    }
    fs::create_dir(dir)?;
    fs::set_permissions(dir, Permissions::from_mode(0o755))?;
    made.push(dir.to_path_buf());
    Ok(())
}

#[cfg(test)]
mod tests;
