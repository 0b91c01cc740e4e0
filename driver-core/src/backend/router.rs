//! The node's [`DeviceSetup`]: each call goes to the family that owns the device (a plan)
//! or the checkpointed [`Setup`] (everything else), which names its family, or is unnamed
//! (written before records named theirs) and goes to the family that takes unnamed records.
//! A device whose family has no setup is planned as [`NoSetup`] plans it (sharing refused,
//! nothing to do); a setup no family here owns cannot be applied or undone
//! ([`SetupError::NoBackend`]: the family was switched off while a claim held it).

use std::sync::Arc;

use graft_record::ContainerEdits;

use crate::claims::setup_port::{DeviceSetup, NoSetup, PciUse, Setup, SetupError};
use crate::model::Allocated;
use crate::model::{Device, Kind};
use crate::opaque::DeviceConfig;

/// A family's setup and what it answers for.
pub struct Route {
    /// Whose it is: the checkpointed setups that name this family are its own.
    pub family: &'static str,
    /// The device kinds it plans.
    pub kinds: fn(Kind) -> bool,
    /// It owns the unnamed setups too (those of checkpoint schema 5 and older, which it
    /// keeps writing so).
    pub unnamed: bool,
    /// The family's setup.
    pub setup: Arc<dyn DeviceSetup>,
}

/// The families' setups, first owner first.
pub struct Router {
    routes: Vec<Route>,
}

impl Router {
    /// A router over `routes` (one per family with a setup).
    pub fn new(routes: Vec<Route>) -> Self {
        Router { routes }
    }

    fn route(&self, setup: &Setup) -> Option<&Route> {
        self.routes.iter().find(|r| match setup.family() {
            Some(family) => r.family == family,
            None => r.unnamed,
        })
    }

    fn for_setup(&self, setup: &Setup) -> Result<&dyn DeviceSetup, SetupError> {
        self.route(setup)
            .map(|r| r.setup.as_ref())
            .ok_or(SetupError::NoBackend)
    }
}

impl DeviceSetup for Router {
    fn plan(
        &self,
        device: &Device,
        config: Option<&DeviceConfig>,
        alloc: &Allocated,
    ) -> Result<Option<Setup>, SetupError> {
        match self.routes.iter().find(|r| (r.kinds)(device.kind)) {
            Some(r) => r.setup.plan(device, config, alloc),
            None => NoSetup.plan(device, config, alloc),
        }
    }

    fn apply(&self, setup: &Setup) -> Result<Option<ContainerEdits>, SetupError> {
        self.for_setup(setup)?.apply(setup)
    }

    fn undo(&self, setup: &Setup) -> Result<(), SetupError> {
        self.for_setup(setup)?.undo(setup)
    }

    fn for_claim(
        &self,
        setup: Setup,
        namespace: &str,
        claim_uid: &str,
    ) -> Result<Setup, SetupError> {
        match self.route(&setup) {
            Some(r) => r.setup.for_claim(setup, namespace, claim_uid),
            None => Ok(setup),
        }
    }

    /// Only a setup of the same family keeps another out.
    fn excludes(&self, setup: &Setup, held: &Setup) -> Option<SetupError> {
        let route = self.route(setup)?;
        let same = self.route(held).is_some_and(|r| std::ptr::eq(r, route));
        same.then(|| route.setup.excludes(setup, held)).flatten()
    }

    fn pci(&self, setup: &Setup) -> Option<PciUse> {
        self.route(setup)?.setup.pci(setup)
    }
}
