//! Device discovery: every backend turns what the node has into [`Device`]s, each with the
//! attributes a DeviceClass or CEL selector matches on and the container edits that make
//! it usable. Backends share one trait so the slice publisher and the prepare path do not
//! care where a device came from.

pub mod char;
pub mod config;
pub mod files;
pub mod inotify;
pub mod inventory;
pub mod nvidia;
pub mod pcie;
pub mod report;
pub mod scan;

pub use crate::model::{Attribute, CapacityPolicy, Consumption, Device, Kind, PCIE_ROOT_ATTRIBUTE};
pub use pcie::pcie_root;
pub use scan::{Discovery, Unavailable};
