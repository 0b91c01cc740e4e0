//! The contract between graft's two daemons, kept in one place.
//!
//! `graft-driver` writes a [`ClaimRecord`] per prepared claim into a [`RecordStore`];
//! `graft-nri` looks records up by pod UID when a container is created and turns them into
//! OCI spec edits. `graft-nri` publishes its [`NriStatus`] so that the driver refuses to
//! prepare while no plugin is in place to inject. The formats are versioned (records:
//! [`OLDEST_RECORD_VERSION`] to [`RECORD_VERSION`]; the other files: [`FORMAT_VERSION`]);
//! files are replaced atomically; which are synced, and why, is `durability`'s rule.

pub mod absent;
pub mod atomic;
mod cache;
pub mod containers;
pub mod devices;
pub mod driver_dir;
pub mod durability;
pub mod env;
mod error;
mod format;
pub mod names;
pub mod nofollow;
pub mod params;
pub mod paths;
pub mod policy;
pub mod read;
pub mod refusals;
mod status;
mod store;
mod stored;
mod validate;

pub use error::{InvalidRecord, RecordError, Result};
pub use format::*;
pub use policy::InjectionPolicy;
pub use status::{
    nri_readiness, plugin_alive, read_boot_id, read_status, NriReadiness, NriStatus,
    StatusPublisher, BOOT_ID_PATH,
};
pub use store::{RecordStore, DEFAULT_STATE_DIR};
pub use stored::{claim_file_uids, parse_record, read_claim_file};
pub use validate::{validate_edits, validate_record};

/// Annotation graft adds to every container it injects into: a JSON list of the claims and
/// devices it received.
pub const INJECTED_ANNOTATION: &str = "graft.dev/injected";
