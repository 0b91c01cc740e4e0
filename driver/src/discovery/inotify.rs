//! Change notification for rescans: an inotify watch on each directory that holds a
//! configured device or the config file. Events are coalesced into one wake-up; the
//! periodic rescan covers whatever a watch misses (a directory created later).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use tokio::sync::mpsc;

/// Watches `paths` (a file is watched through its directory, since editors replace files)
/// and sends on `tx` after any change. Returns how many directories are watched.
pub fn spawn_watcher(paths: &[PathBuf], tx: mpsc::Sender<()>) -> std::io::Result<usize> {
    // SAFETY: plain syscall; the fd is owned by the thread below.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mask = libc::IN_CREATE
        | libc::IN_DELETE
        | libc::IN_MOVED_FROM
        | libc::IN_MOVED_TO
        | libc::IN_CLOSE_WRITE
        | libc::IN_ATTRIB;
    let mut watched = 0;
    let mut seen = Vec::new();
    for p in paths {
        let dir = if p.is_dir() {
            p.clone()
        } else {
            match p.parent() {
                Some(d) => d.to_path_buf(),
                None => continue,
            }
        };
        if seen.contains(&dir) {
            continue;
        }
        seen.push(dir.clone());
        let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
            continue;
        };
        // SAFETY: fd is a live inotify fd and c a NUL-terminated path.
        if unsafe { libc::inotify_add_watch(fd, c.as_ptr(), mask) } >= 0 {
            watched += 1;
        } else {
            tracing::debug!(dir = %dir.display(), error = %std::io::Error::last_os_error(), "cannot watch");
        }
    }
    std::thread::Builder::new()
        .name("graft-inotify".into())
        .spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                // SAFETY: reading into a buffer we own.
                let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0 {
                    let e = std::io::Error::last_os_error();
                    if e.kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    tracing::warn!(error = %e, "inotify read failed; relying on periodic rescans");
                    break;
                }
                // A full channel already holds a pending wake-up.
                if tx.try_send(()).is_err() && tx.is_closed() {
                    break;
                }
            }
            // SAFETY: the fd is ours and no longer used.
            unsafe { libc::close(fd) };
        })?;
    Ok(watched)
}
