//! What containers the runtime no longer has leave in the state directory: graftctl's
//! container entries and the per-container params copies graft-hook makes. Removed when
//! the runtime removes a container, and swept on Synchronize for those removed while
//! graft-nri was away. Best effort, on blocking threads: a leftover costs a few bytes.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use graft_proto::nri;
use graft_record::containers::{prune_entries, remove_entry, written_before};
use graft_record::{params, policy::params_copy_path};

use super::GraftPlugin;

/// How long before the sweep a leftover must have been written to be swept: far longer than
/// the Synchronize answer can precede the sweep (decoding the request), and file times are
/// coarse. A leftover kept by it waits for the next Synchronize.
const SWEEP_MARGIN: Duration = Duration::from_secs(60);

impl GraftPlugin {
    /// Removes the leftovers of every container not in `containers` (the runtime's own)
    /// written more than [`SWEEP_MARGIN`] before now. Synchronize is answered before this
    /// runs, so the runtime may have created containers since its list was taken.
    pub(super) fn sweep_leftovers(&self, containers: &[nri::Container]) {
        let live: HashSet<String> = containers.iter().map(|c| c.id.clone()).collect();
        let state_dir = self.store.root().to_path_buf();
        let since = SystemTime::now()
            .checked_sub(SWEEP_MARGIN)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        tokio::task::spawn_blocking(move || {
            sweep_params_copies(&state_dir, &live, since);
            if let Err(e) = prune_entries(&state_dir, &live, since) {
                tracing::warn!(error = %e, "cannot prune graftctl's container entries");
            }
        });
    }

    /// Removes the leftovers of a container the runtime removed.
    pub(super) fn container_removed(&self, ctr: &nri::Container) {
        self.entries.forget(&ctr.id);
        let (root, id) = (self.store.root().to_path_buf(), ctr.id.clone());
        tokio::task::spawn_blocking(move || {
            if let Err(e) = remove_entry(&root, &id) {
                tracing::warn!(container = %id, error = %e, "cannot remove the graftctl entry");
            }
        });
        // graft-hook unlinks its per-container copies once they are mounted; this
        // removes any a failed hook left behind.
        if let Some(copy) = params_copy_path(self.store.root(), &ctr.id) {
            tokio::task::spawn_blocking(move || {
                for suffix in params::COPY_SUFFIXES {
                    remove_if_present(std::path::Path::new(&format!("{}{suffix}", copy.display())));
                }
            });
        }
    }
}

/// Removes params copies (`nvidia/params.<id>` in the state directory) of containers the
/// runtime no longer has, written before `since`.
fn sweep_params_copies(state_dir: &std::path::Path, live: &HashSet<String>, since: SystemTime) {
    let base = params::params_copy_base(state_dir);
    let Some(parent) = base.parent() else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(id) = params::container_of(&name) {
            let old = e.metadata().is_ok_and(|m| written_before(&m, since));
            if !live.contains(id) && old {
                remove_if_present(&e.path());
            }
        }
    }
}

fn remove_if_present(path: &std::path::Path) {
    match std::fs::remove_file(path) {
        Ok(()) => tracing::info!(path = %path.display(), "removed a leftover params copy"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(path = %path.display(), error = %e, "cannot remove a params copy"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_written_since_the_cut_off_is_kept_whatever_the_live_list_says() {
        let d = tempfile::tempdir().unwrap();
        let nvidia = d.path().join("nvidia");
        std::fs::create_dir_all(&nvidia).unwrap();
        for id in ["gone", "live"] {
            std::fs::write(nvidia.join(format!("params.{id}")), "x").unwrap();
        }
        let live = HashSet::from(["live".to_string()]);
        let exists = |id: &str| nvidia.join(format!("params.{id}")).exists();
        sweep_params_copies(d.path(), &live, SystemTime::now() - SWEEP_MARGIN);
        assert!(exists("gone") && exists("live"), "written since: kept");
        sweep_params_copies(d.path(), &live, SystemTime::now() + SWEEP_MARGIN);
        assert!(!exists("gone") && exists("live"));
    }
}
