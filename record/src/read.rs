//! Reading a state file the way a reader that trusts nothing must: never through a symlink,
//! only a regular file, and never more than a cap. graftctl reads every file of the state
//! directory this way, since another process could have put anything there.

use std::fs::{File, Metadata};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::atomic::NOFOLLOW_CLOEXEC;
use crate::error::{RecordError, Result};

/// Cap for one claim record, the NRI status file, a container entry.
pub const SMALL_FILE_CAP: u64 = 1 << 20;
/// Cap for the device snapshot: a node with thousands of devices.
pub const LARGE_FILE_CAP: u64 = 16 << 20;

/// The bytes of `path`, `None` when it does not exist. A symlink, a non-regular file and a
/// file over `cap` bytes are errors naming the file.
pub fn read_state_file(path: &Path, cap: u64) -> Result<Option<Vec<u8>>> {
    match open_state_file(path, cap)? {
        Some((f, meta)) => read_capped(&f, &meta, path, cap).map(Some),
        None => Ok(None),
    }
}

/// Opens `path` for [`read_state_file`]: never through a symlink, never blocking on a FIFO,
/// a regular file of at most `cap` bytes; with what `fstat` said of it. `None` when it does
/// not exist.
pub(crate) fn open_state_file(path: &Path, cap: u64) -> Result<Option<(File, Metadata)>> {
    let f = match File::options()
        .read(true)
        // O_NONBLOCK: a FIFO planted at a state file's name must not block the open.
        .custom_flags(NOFOLLOW_CLOEXEC | nix::libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        // O_NOFOLLOW on a symlink fails with ELOOP.
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(RecordError::io(
                "read",
                path,
                std::io::Error::other("is a symlink; state files are never read through one"),
            ))
        }
        Err(e) => return Err(RecordError::io("open", path, e)),
    };
    let meta = f.metadata().map_err(|e| RecordError::io("stat", path, e))?;
    if !meta.file_type().is_file() {
        return Err(RecordError::io(
            "read",
            path,
            std::io::Error::other("is not a regular file"),
        ));
    }
    if meta.len() > cap {
        return Err(too_big(path, cap));
    }
    Ok(Some((f, meta)))
}

/// The content of a file opened by [`open_state_file`], at most `cap` bytes.
pub(crate) fn read_capped(f: &File, meta: &Metadata, path: &Path, cap: u64) -> Result<Vec<u8>> {
    let mut data = Vec::with_capacity(meta.len() as usize);
    // One more than the cap: a file that grew after the stat is caught too.
    f.take(cap + 1)
        .read_to_end(&mut data)
        .map_err(|e| RecordError::io("read", path, e))?;
    if data.len() as u64 > cap {
        return Err(too_big(path, cap));
    }
    Ok(data)
}

fn too_big(path: &Path, cap: u64) -> RecordError {
    RecordError::io(
        "read",
        path,
        std::io::Error::other(format!("is larger than {cap} bytes")),
    )
}

/// Visible entry names of a directory, sorted; a missing directory is empty. Names that are
/// not UTF-8 are skipped.
pub fn list_names(dir: &Path) -> Result<Vec<String>> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(RecordError::io("read dir", dir, e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| RecordError::io("read dir", dir, e))?;
        if let Some(name) = entry.file_name().to_str() {
            if !name.starts_with('.') {
                out.push(name.to_string());
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlinks_fifos_and_big_files_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        std::fs::write(p.join("ok"), b"{}").unwrap();
        assert_eq!(read_state_file(&p.join("ok"), 10).unwrap().unwrap(), b"{}");
        assert!(read_state_file(&p.join("none"), 10).unwrap().is_none());
        std::os::unix::fs::symlink(p.join("ok"), p.join("link")).unwrap();
        let e = read_state_file(&p.join("link"), 10)
            .unwrap_err()
            .to_string();
        assert!(e.contains("link") && e.contains("symlink"), "{e}");
        std::fs::write(p.join("big"), vec![b' '; 11]).unwrap();
        let e = read_state_file(&p.join("big"), 10).unwrap_err().to_string();
        assert!(e.contains("big") && e.contains("larger than 10"), "{e}");
        nix::unistd::mkfifo(&p.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = read_state_file(&p.join("fifo"), 10)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::create_dir(p.join("dir")).unwrap();
        assert!(read_state_file(&p.join("dir"), 10).is_err());
    }
}
