//! MPS tenancy where the scheduler sees it. MPS keeps one namespace per GPU (its server,
//! pipe directory and /dev/shm are shared by every client), which prepare enforces; that
//! is too late to choose another GPU, since the pod is bound by then. So while a namespace
//! holds a share of an MPS GPU, the GPU's device carries the taint
//! `<driver>/mps-tenant=<namespace>` (NoSchedule): the scheduler allocates it only to claims
//! that tolerate that value, which the chart's admission policy adds to every claim of the
//! namespace and refuses in any other (deploy/helm/graft/templates/56-mps-tenancy.yaml).
//! The tenant is read from the share markers on disk, the same record prepare checks, so a
//! restart publishes what holds.
//!
//! Between a claim's allocation and its prepare the GPU has no taint yet: a second
//! namespace's claim allocated in that window is still refused at prepare (docs/nvidia.md).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use graft_driver_core::model::{Device, FamilyTaint, FamilyTaints};
use tokio::sync::watch;

use super::kinds::FAMILY;
use super::mps::MpsManager;
use crate::devices::Identity;

/// The taint's key, below the driver's name.
pub const TENANT_KEY: &str = "mps-tenant";

/// The taints of `devices`' MPS GPUs for `tenants` (GPU UUID to namespace). `since` keeps
/// when each GPU's tenancy was first seen, so that an unchanged taint is not rewritten.
pub fn taints(
    devices: &[Device],
    tenants: &BTreeMap<String, String>,
    since: &mut BTreeMap<(String, String), SystemTime>,
    now: SystemTime,
) -> BTreeMap<String, Vec<FamilyTaint>> {
    since.retain(|(uuid, ns), _| tenants.get(uuid) == Some(ns));
    let mut out = BTreeMap::new();
    for d in devices {
        let id = Identity::of(d);
        let Some(uuid) = id.uuid.filter(|_| id.mps) else {
            continue;
        };
        let Some(ns) = tenants.get(&uuid) else {
            continue;
        };
        let at = *since.entry((uuid, ns.clone())).or_insert(now);
        out.insert(
            d.name.clone(),
            vec![FamilyTaint {
                key: TENANT_KEY,
                value: ns.clone(),
                since: at,
            }],
        );
    }
    out
}

/// Keeps NVIDIA's part of `out` equal to the MPS tenants: when a share is marked or
/// dropped, when the inventory changes, and every `every` (a marker graft-mps's restore
/// dropped).
pub async fn run(
    mps: MpsManager,
    mut inventory: watch::Receiver<Vec<Device>>,
    out: watch::Sender<FamilyTaints>,
    every: Duration,
) {
    let mut since = BTreeMap::new();
    loop {
        let m = mps.clone();
        let tenants = match tokio::task::spawn_blocking(move || m.tenants()).await {
            Ok(t) => t,
            Err(e) => {
                tracing::error!(error = %e, "reading the MPS tenants panicked");
                BTreeMap::new()
            }
        };
        let devices = inventory.borrow_and_update().clone();
        let t = taints(&devices, &tenants, &mut since, SystemTime::now());
        out.send_if_modified(|f| f.set(FAMILY, t));
        tokio::select! {
            _ = mps.changed.notified() => {}
            r = inventory.changed() => if r.is_err() { return },
            _ = tokio::time::sleep(every) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use graft_api::attributes::{SHARING, UUID};
    use graft_driver_core::model::{Attribute, Kind};

    fn gpu(name: &str, uuid: &str, mps: bool) -> Device {
        let mut d = Device::new(name, Kind::Whole);
        d.attributes
            .insert(UUID.into(), Attribute::String(uuid.into()));
        if mps {
            d.attributes.insert(
                SHARING.into(),
                Attribute::String(graft_api::sharing::MPS.into()),
            );
        }
        d
    }

    #[test]
    fn only_the_tenants_mps_gpus_are_tainted_and_since_holds() {
        let devices = [
            gpu("gpu-0", "GPU-0", true),
            gpu("gpu-1", "GPU-1", true),
            gpu("gpu-2", "GPU-2", false),
        ];
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let t1 = t0 + Duration::from_secs(5);
        let mut since = BTreeMap::new();
        // GPU-2 is not shared through MPS: a stray marker taints nothing.
        let tenants = BTreeMap::from([
            ("GPU-0".to_string(), "a".to_string()),
            ("GPU-2".to_string(), "a".to_string()),
        ]);
        let first = taints(&devices, &tenants, &mut since, t0);
        assert_eq!(first.keys().collect::<Vec<_>>(), ["gpu-0"]);
        assert_eq!(
            first["gpu-0"],
            [FamilyTaint {
                key: TENANT_KEY,
                value: "a".into(),
                since: t0
            }]
        );
        // Unchanged later: the same taint, so nothing is rewritten.
        assert_eq!(taints(&devices, &tenants, &mut since, t1), first);
        // Namespace b follows a on GPU-0: a new taint, from now.
        let tenants = BTreeMap::from([("GPU-0".to_string(), "b".to_string())]);
        let next = taints(&devices, &tenants, &mut since, t1);
        assert_eq!(
            (next["gpu-0"][0].value.as_str(), next["gpu-0"][0].since),
            ("b", t1)
        );
        // No tenant: no taint.
        assert!(taints(&devices, &BTreeMap::new(), &mut since, t1).is_empty());
        assert!(since.is_empty());
    }

    #[test]
    fn a_family_changes_only_its_own_taints() {
        let mut all = FamilyTaints::default();
        let t = |v: &str| FamilyTaint {
            key: TENANT_KEY,
            value: v.into(),
            since: SystemTime::UNIX_EPOCH,
        };
        let mine = BTreeMap::from([("gpu-0".to_string(), vec![t("a")])]);
        assert!(all.set(FAMILY, mine.clone()));
        assert!(!all.set(FAMILY, mine));
        assert!(all.set(
            "other",
            BTreeMap::from([("gpu-0".to_string(), vec![t("x")])])
        ));
        let values: Vec<_> = all.of("gpu-0").map(|t| t.value.as_str()).collect();
        assert_eq!(values, ["a", "x"]);
        assert!(all.set(FAMILY, BTreeMap::new()));
        assert_eq!(all.of("gpu-0").count(), 1);
    }
}
