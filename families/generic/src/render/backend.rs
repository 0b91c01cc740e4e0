//! The render family as a [`Backend`]: render nodes found in sysfs, with no node-side
//! setup and no tasks of its own.

use super::scan::RenderDiscovery;
use graft_driver_core::backend::scan::Discovery;
use graft_driver_core::backend::{Backend, Node};

/// The render family on this node.
pub struct RenderBackend {
    discovery: Option<Box<dyn Discovery>>,
}

impl RenderBackend {
    /// Reads nothing yet: the first scan finds the nodes.
    pub fn new(node: &Node) -> Self {
        let dev = node
            .dev_root
            .clone()
            .unwrap_or_else(|| node.host_root.join("dev"));
        RenderBackend {
            discovery: Some(Box::new(RenderDiscovery::new(node.sysfs_root.clone(), dev))),
        }
    }
}

impl Backend for RenderBackend {
    fn name(&self) -> &'static str {
        "render"
    }

    fn take_discovery(&mut self) -> Option<Box<dyn Discovery>> {
        self.discovery.take()
    }
}
