//! Change notification for rescans: an inotify watch on each directory that holds a
//! configured device, a served entry or the config file. Events are coalesced into one
//! wake-up. After each, the watches are added again from the backends' current paths, so a
//! directory that appears later (a served directory created after start) is watched from
//! then on; the periodic rescan covers whatever is still missed.

use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::sync::mpsc;

const MASK: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_ATTRIB);

/// Watches the directories of `paths()` (a file is watched through its directory, since
/// editors replace files) and sends on `tx` after any change. Returns how many directories
/// are watched at first.
pub fn spawn_watcher<F>(paths: F, tx: mpsc::Sender<()>) -> std::io::Result<usize>
where
    F: Fn() -> Vec<PathBuf> + Send + 'static,
{
    watcher_thread(paths, tx).map(|(n, _)| n)
}

/// As [`spawn_watcher`], with the watcher's thread (for a caller that watches it end).
pub fn watcher_thread<F>(
    paths: F,
    tx: mpsc::Sender<()>,
) -> std::io::Result<(usize, std::thread::JoinHandle<()>)>
where
    F: Fn() -> Vec<PathBuf> + Send + 'static,
{
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC)?;
    let watched = add_watches(&inotify, &paths());
    // Reads block, so they run on a thread of their own, never on the async runtime.
    let thread = std::thread::Builder::new()
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
            // Adding a watch that exists is a no-op; new directories get theirs.
            add_watches(&inotify, &paths());
            // A full channel already holds a pending wake-up.
            if tx.try_send(()).is_err() && tx.is_closed() {
                break;
            }
        })?;
    Ok((watched, thread))
}

fn add_watches(inotify: &Inotify, paths: &[PathBuf]) -> usize {
    let mut seen: Vec<&Path> = Vec::new();
    for p in paths {
        let dir = if p.is_dir() {
            p.as_path()
        } else {
            match p.parent() {
                Some(d) => d,
                None => continue,
            }
        };
        if seen.contains(&dir) {
            continue;
        }
        if let Err(e) = inotify.add_watch(dir, MASK) {
            tracing::debug!(dir = %dir.display(), error = %e, "cannot watch");
            continue;
        }
        seen.push(dir);
    }
    seen.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_change_in_a_watched_directory_wakes() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("devices.toml");
        let (tx, mut rx) = mpsc::channel(1);
        // The file need not exist: its directory is watched.
        let c = config.clone();
        assert_eq!(
            spawn_watcher(move || vec![c.clone(), c.clone()], tx).unwrap(),
            1
        );
        std::fs::write(&config, "x").unwrap();
        let woke = rx.blocking_recv();
        assert_eq!(woke, Some(()));
    }

    #[test]
    fn a_directory_that_appears_later_is_watched_from_then_on() {
        let top = tempfile::tempdir().unwrap();
        let served = top.path().join("licences");
        let (tx, mut rx) = mpsc::channel(1);
        let s = served.clone();
        // The served directory is absent: only its parent is watched at first.
        let n = spawn_watcher(move || vec![s.clone(), s.parent().unwrap().into()], tx).unwrap();
        assert_eq!(n, 1);
        std::fs::create_dir(&served).unwrap();
        assert_eq!(rx.blocking_recv(), Some(()));
        // Give the watcher its turn to add the new directory's watch.
        std::thread::sleep(Duration::from_millis(200));
        while rx.try_recv().is_ok() {}
        std::fs::write(served.join("seat-1"), "1").unwrap();
        assert_eq!(rx.blocking_recv(), Some(()));
    }
}
