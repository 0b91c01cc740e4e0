//! The files family as a [`Backend`]: entries of served directories, each checked again
//! at prepare ([`ServedEntries`]).

use std::path::PathBuf;
use std::sync::Arc;

use super::check::ServedEntries;
use super::refused::RefusedDirs;
use super::scan::FilesDiscovery;
use graft_driver_core::backend::router::Route;
use graft_driver_core::backend::scan::Discovery;
use graft_driver_core::backend::{Backend, BackendError, Node};
use graft_driver_core::claims::setup_port::NoSetup;
use graft_driver_core::model::Kind;

/// The files family on this node.
pub struct FilesBackend {
    discovery: Option<Box<dyn Discovery>>,
    host_root: PathBuf,
}

impl FilesBackend {
    /// Reads the devices config; refused directories are counted in the node's metrics.
    pub fn new(node: &Node) -> Result<Self, BackendError> {
        let d = FilesDiscovery::new(
            node.device_config.clone(),
            node.host_root.clone(),
            &node.allowed_mount_roots,
        )?
        .with_refusals(RefusedDirs::with_gauge(node.metrics.served_dirs_refused()));
        Ok(FilesBackend {
            discovery: Some(Box::new(d)),
            host_root: node.host_root.clone(),
        })
    }
}

impl Backend for FilesBackend {
    fn name(&self) -> &'static str {
        "files"
    }

    fn take_discovery(&mut self) -> Option<Box<dyn Discovery>> {
        self.discovery.take()
    }

    fn route(&self) -> Option<Route> {
        Some(Route {
            family: "files",
            kinds: |k| matches!(k, Kind::Entry(_)),
            // Served entries need nothing done on the node: no setup records.
            unnamed: false,
            setup: Arc::new(ServedEntries {
                inner: Arc::new(NoSetup),
                host_root: self.host_root.clone(),
            }),
        })
    }
}
