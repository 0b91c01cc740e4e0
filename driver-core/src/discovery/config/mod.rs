//! The devices config (`devices.toml`) that the char and files backends share: `[[devices]]`
//! entries name device nodes, `[[files]]` entries name served directories. Each backend
//! reads it on every scan, so edits apply without a restart. The config owns its entries;
//! the backends import them from here.

mod attribute;
mod char_entry;
mod files_entry;
mod invalid;
mod load;

pub use attribute::ConfigAttribute;
pub use char_entry::CharEntry;
pub use files_entry::{Entries, FilesEntry, OWN_ATTRIBUTES};
pub use invalid::InvalidEntry;
pub use load::{load_config, DevicesConfig, DEFAULT_CONFIG_PATH};
