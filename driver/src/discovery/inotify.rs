//! Change notification for rescans: an inotify watch on each directory that holds a
//! configured device or the config file. Events are coalesced into one wake-up; the
//! periodic rescan covers whatever a watch misses (a directory created later).

use std::path::PathBuf;

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::sync::mpsc;

/// Watches `paths` (a file is watched through its directory, since editors replace files)
/// and sends on `tx` after any change. Returns how many directories are watched.
pub fn spawn_watcher(paths: &[PathBuf], tx: mpsc::Sender<()>) -> std::io::Result<usize> {
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC)?;
    let mask = AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_ATTRIB;
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
        match inotify.add_watch(&dir, mask) {
            Ok(_) => watched += 1,
            Err(e) => tracing::debug!(dir = %dir.display(), error = %e, "cannot watch"),
        }
        seen.push(dir);
    }
    // Reads block, so they run on a thread of their own, never on the async runtime.
    std::thread::Builder::new()
        .name("graft-inotify".into())
        .spawn(move || loop {
            match inotify.read_events() {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "inotify read failed; relying on periodic rescans");
                    break;
                }
            }
            // A full channel already holds a pending wake-up.
            if tx.try_send(()).is_err() && tx.is_closed() {
                break;
            }
        })?;
    Ok(watched)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_in_a_watched_directory_wakes() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("devices.toml");
        let (tx, mut rx) = mpsc::channel(1);
        // The file need not exist: its directory is watched.
        assert_eq!(
            spawn_watcher(&[config.clone(), config.clone()], tx).unwrap(),
            1
        );
        std::fs::write(&config, "x").unwrap();
        let woke = rx.blocking_recv();
        assert_eq!(woke, Some(()));
    }
}
