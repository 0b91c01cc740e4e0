//! The `files` backend: the entries of host directories as devices, one per file (or per
//! subdirectory, or socket), bind-mounted into the containers of the claim that gets it. A
//! licence file per seat, a pre-staged data shard, a scratch directory for one job.
//!
//! ```toml
//! [[files]]
//! dir = "/var/lib/graft-files/licences"   # must lie under --allowed-mount-roots
//! entries = "files"                       # or "directories", "sockets"
//! pattern = "*.lic"                       # optional: which names count (hidden ones never)
//! container_path = "/etc/app/licence.lic" # optional: default, the entry's host path
//! env = "LICENCE_FILE"                    # optional: default GRAFT_FILE_<DEVICE_NAME>
//! read_write = false                      # default: read-only
//! exec = false                            # default: noexec
//! attributes = { type = "licence" }       # type is required
//! ```
//!
//! An entry is served only if it, and every directory above it, is reached without a
//! symlink ([`graft_record::nofollow`]): a symlink planted in a served directory is never
//! published, and prepare (here, [`ServedEntries`]) and graft-nri check the entry again.
//! A served directory, and every directory above it, must be root's and writable by no one
//! else (else it is refused, [`RefusedDirs`]); read-write entries must lie below a
//! directory closed to group and others ([`graft_record::nofollow::open_served`]).

pub mod backend;
mod check;
mod entry;
mod refused;
mod scan;

pub use check::ServedEntries;
pub use entry::device_name;
pub use refused::RefusedDirs;
pub use scan::FilesDiscovery;
