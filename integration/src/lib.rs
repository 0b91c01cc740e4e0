//! The testbed: real containerd (2.2.x and 1.7.24), runc and crictl from the cache that
//! `integration/testbed/setup.sh` fills, driven from Rust through CRI.

pub mod containerd;
pub mod cri;
pub mod nri;
pub mod records;
pub mod testbed;

pub use containerd::{Containerd, Version};
pub use cri::Cri;
pub use nri::GraftNri;
pub use testbed::Testbed;
