//! The `char` backend: device nodes named in a config file, by path or glob.
//!
//! ```toml
//! [[devices]]
//! path = "/dev/fuse"
//! attributes = { type = "fuse" }
//!
//! [[devices]]
//! path = "/dev/ttyUSB*"          # a glob: one device per match, hot-plugged ones included
//! attributes = { type = "serial", vendor = "ftdi" }
//! mode = 0o660
//! gid = 20
//! ```
//!
//! The config (shared with the files backend, and read by `discovery::config`) is re-read on every scan,
//! so edits apply without a restart.

pub mod backend;
mod scan;

pub use scan::{default_name, CharDiscovery};
