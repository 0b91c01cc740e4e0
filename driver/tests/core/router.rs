//! The router: each call to the family that owns the device or the record.

use std::sync::{Arc, Mutex};

use graft_driver::backend::router::{Route, Router};
use graft_driver::claims::setup_port::{DeviceSetup, PciUse, Setup, SetupError};
use graft_driver::discovery::nvidia::setup::NvidiaWork;
use graft_driver::model::{Allocated, Device, Kind};
use graft_driver::opaque::DeviceConfig;
use graft_record::ContainerEdits;

fn vfio(pci: &str) -> Setup {
    NvidiaWork::vfio(pci).record().unwrap()
}

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
        Ok(Some(vfio(self.0)))
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
    let params = serde_json::json!({
        "apiVersion": "graft.dev/v1alpha1", "kind": "DeviceConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicing": {"interval": "Long"}}
    });
    graft_driver::opaque::decode(0, &params, &graft_driver::families::opaque()).unwrap()
}

#[test]
fn each_call_goes_to_its_owner() {
    let gpu = Arc::new(Named("gpu", Mutex::default()));
    let router = Router::new(vec![Route {
        family: "nvidia",
        kinds: |k| matches!(k, Kind::Whole | Kind::Passthrough),
        unnamed: true,
        setup: gpu.clone(),
    }]);
    let alloc = Allocated::default();
    let planned = router
        .plan(&Device::new("gpu-0", Kind::Whole), None, &alloc)
        .unwrap();
    assert_eq!(planned, Some(vfio("gpu")));
    // A char device: no owner, so nothing to do, and sharing refused.
    let fuse = Device::new("fuse-0", Kind::Char);
    assert_eq!(router.plan(&fuse, None, &alloc).unwrap(), None);
    let err = router.plan(&fuse, Some(&sharing()), &alloc).unwrap_err();
    assert!(matches!(err, SetupError::NotSupported { .. }), "{err}");
    router.apply(&vfio("0000:18:00.0")).unwrap();
    router.undo(&vfio("0000:18:00.0")).unwrap();
    // A setup nobody owns (another family's record): as on a node without the family.
    let mig = Setup::new(
        Some("acme"),
        1,
        &serde_json::json!({"kind": "timeSlice", "pciBusId": "0000:18:00.0", "interval": 3}),
    )
    .unwrap();
    assert!(matches!(router.apply(&mig), Err(SetupError::NoBackend)));
    assert!(matches!(router.undo(&mig), Err(SetupError::NoBackend)));
    let calls = gpu.1.lock().unwrap().clone();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(calls[0], "plan gpu-0");
}

/// Says, for every record, which family it went to.
struct Family(&'static str);

impl DeviceSetup for Family {
    fn plan(
        &self,
        _: &Device,
        _: Option<&DeviceConfig>,
        _: &Allocated,
    ) -> Result<Option<Setup>, SetupError> {
        Ok(None)
    }
    fn apply(&self, _: &Setup) -> Result<Option<ContainerEdits>, SetupError> {
        Ok(None)
    }
    fn undo(&self, _: &Setup) -> Result<(), SetupError> {
        Err(SetupError::NotSupported {
            device: self.0.into(),
            reason: "undone here",
        })
    }
    fn excludes(&self, _: &Setup, _: &Setup) -> Option<SetupError> {
        Some(SetupError::NoBackend)
    }
    fn pci(&self, _: &Setup) -> Option<PciUse> {
        Some(PciUse {
            functions: vec![self.0.into()],
            passthrough: false,
        })
    }
}

#[test]
fn each_record_goes_to_its_family_by_name() {
    let router = Router::new(vec![
        Route {
            family: "acme",
            kinds: |_| false,
            unnamed: false,
            setup: Arc::new(Family("acme")),
        },
        Route {
            family: "nvidia",
            kinds: |_| false,
            unnamed: true,
            setup: Arc::new(Family("nvidia")),
        },
    ]);
    let named = |family| Setup::new(Some(family), 1, &serde_json::json!({"kind": "k"}));
    let owner = |s: &Setup| match router.undo(s) {
        Err(SetupError::NotSupported { device, .. }) => device,
        other => panic!("{other:?}"),
    };
    let (unnamed, acme) = (vfio("0000:18:00.0"), named("acme").unwrap());
    assert_eq!(owner(&unnamed), "nvidia");
    assert_eq!(owner(&named("nvidia").unwrap()), "nvidia");
    assert_eq!(owner(&acme), "acme");
    let gone = named("gone").unwrap();
    assert!(matches!(router.undo(&gone), Err(SetupError::NoBackend)));
    assert_eq!(router.pci(&acme).unwrap().functions, ["acme"]);
    assert_eq!(router.pci(&unnamed).unwrap().functions, ["nvidia"]);
    assert_eq!(router.pci(&gone), None);
    // Only a record of the same family keeps another out.
    assert!(router.excludes(&acme, &acme).is_some());
    assert!(router.excludes(&acme, &unnamed).is_none());
    assert!(router.excludes(&unnamed, &gone).is_none());
    // A record nobody here owns is kept as it is.
    assert_eq!(router.for_claim(gone.clone(), "ns", "u").unwrap(), gone);
}
