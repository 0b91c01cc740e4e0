//! The node's [`DeviceSetup`]: each call goes to the family that owns the device (a plan)
//! or the checkpointed [`Setup`] (an apply or undo). A device whose family has no setup is
//! planned as [`NoSetup`] plans it (sharing refused, nothing to do); a setup no family here
//! owns cannot be applied or undone ([`SetupError::NoBackend`]: the family was switched off
//! while a claim held it).

use std::sync::Arc;

use graft_record::ContainerEdits;

use crate::claims::setup_port::{DeviceSetup, NoSetup, Setup, SetupError};
use crate::model::Allocated;
use crate::model::{Device, Kind};
use crate::opaque::DeviceConfig;

/// A family's setup and what it answers for.
pub struct Route {
    /// Whose it is.
    pub family: &'static str,
    /// The device kinds it plans.
    pub kinds: fn(Kind) -> bool,
    /// The checkpointed setups it applies and undoes.
    pub setups: fn(&Setup) -> bool,
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

    fn for_setup(&self, setup: &Setup) -> Result<&dyn DeviceSetup, SetupError> {
        self.routes
            .iter()
            .find(|r| (r.setups)(setup))
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Answers every call with its name, and keeps the calls.
    struct Named(&'static str, Mutex<Vec<String>>);

    impl DeviceSetup for Named {
        fn plan(
            &self,
            device: &Device,
            _: Option<&DeviceConfig>,
            _: &Allocated,
        ) -> Result<Option<Setup>, SetupError> {
            self.1.lock().unwrap().push(format!("plan {}", device.name));
            Ok(Some(Setup::vfio(self.0)))
        }
        fn apply(&self, setup: &Setup) -> Result<Option<ContainerEdits>, SetupError> {
            self.1.lock().unwrap().push(format!("apply {setup:?}"));
            Ok(None)
        }
        fn undo(&self, setup: &Setup) -> Result<(), SetupError> {
            self.1.lock().unwrap().push(format!("undo {setup:?}"));
            Ok(())
        }
    }

    fn sharing() -> DeviceConfig {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "graft.dev/v1alpha1", "kind": "DeviceConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicing": {"interval": "Long"}}
        }))
        .unwrap()
    }

    #[test]
    fn each_call_goes_to_its_owner() {
        let gpu = Arc::new(Named("gpu", Mutex::default()));
        let router = Router::new(vec![Route {
            family: "nvidia",
            kinds: |k| matches!(k, Kind::Whole | Kind::Passthrough),
            setups: |s| matches!(s, Setup::Vfio { .. }),
            setup: gpu.clone(),
        }]);
        let alloc = Allocated::default();
        let planned = router
            .plan(&Device::new("gpu-0", Kind::Whole), None, &alloc)
            .unwrap();
        assert_eq!(planned, Some(Setup::vfio("gpu")));
        // A char device: no owner, so nothing to do, and sharing refused.
        let fuse = Device::new("fuse-0", Kind::Char);
        assert_eq!(router.plan(&fuse, None, &alloc).unwrap(), None);
        let err = router.plan(&fuse, Some(&sharing()), &alloc).unwrap_err();
        assert!(matches!(err, SetupError::NotSupported { .. }), "{err}");
        router.apply(&Setup::vfio("0000:18:00.0")).unwrap();
        router.undo(&Setup::vfio("0000:18:00.0")).unwrap();
        // A setup nobody owns: as on a node without the family.
        let mig = Setup::TimeSlice {
            pci_bus_id: "0000:18:00.0".into(),
            interval: 3,
        };
        assert!(matches!(router.apply(&mig), Err(SetupError::NoBackend)));
        assert!(matches!(router.undo(&mig), Err(SetupError::NoBackend)));
        let calls = gpu.1.lock().unwrap().clone();
        assert_eq!(calls.len(), 3, "{calls:?}");
        assert_eq!(calls[0], "plan gpu-0");
    }
}
