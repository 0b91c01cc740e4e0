//! The char family as a [`Backend`]: device nodes from the devices config, with no
//! node-side setup and no tasks of its own.

use super::scan::CharDiscovery;
use graft_driver_core::backend::scan::Discovery;
use graft_driver_core::backend::{Backend, BackendError, Node};

/// The char family on this node.
pub struct CharBackend {
    discovery: Option<Box<dyn Discovery>>,
}

impl CharBackend {
    /// Reads the devices config.
    pub fn new(node: &Node) -> Result<Self, BackendError> {
        let d = CharDiscovery::new(
            node.device_config.clone(),
            node.sysfs_root.clone(),
            node.host_root.clone(),
        )?;
        Ok(CharBackend {
            discovery: Some(Box::new(d)),
        })
    }
}

impl Backend for CharBackend {
    fn name(&self) -> &'static str {
        "char"
    }

    fn take_discovery(&mut self) -> Option<Box<dyn Discovery>> {
        self.discovery.take()
    }
}
