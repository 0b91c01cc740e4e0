//! What the API server keeps of the fields graft writes into ResourceSlices. A field behind
//! a feature gate that is off is dropped on write: once a write shows that, the publisher
//! logs it once and stops offering what needs it, or every reconcile would find the slices
//! different and rewrite them forever.

use std::borrow::Cow;

use k8s_openapi::api::resource::v1::ResourceSlice;

use crate::model::Device;
use crate::slices::{count_binding, count_counters, count_shared, count_taints};

/// Which gated fields the API server keeps; all until a write shows otherwise.
#[derive(Debug, Clone, Copy)]
pub(super) struct Kept {
    /// Device taints (DRADeviceTaints): health, graft-nri's outage, the families' taints.
    pub(super) taints: bool,
    /// Counters (DRAPartitionableDevices): without them partitionable devices (dynamic MIG
    /// placements) are not offered, since the scheduler would hand out overlapping ones.
    pub(super) counters: bool,
    /// `allowMultipleAllocations` (DRAConsumableCapacity): shared devices are offered whole.
    pub(super) shared: bool,
    /// Binding conditions (DRADeviceBindingConditions): devices are offered without them,
    /// and their pods are bound at once (a family's prepare then waits).
    pub(super) binding: bool,
}

impl Default for Kept {
    fn default() -> Self {
        Kept {
            taints: true,
            counters: true,
            shared: true,
            binding: true,
        }
    }
}

impl Kept {
    /// `devices` as they may be offered: without what the API server drops.
    pub(super) fn offered<'a>(&self, devices: &'a [Device]) -> Cow<'a, [Device]> {
        if self.shared && self.binding {
            return Cow::Borrowed(devices);
        }
        Cow::Owned(
            devices
                .iter()
                .map(|d| Device {
                    shared: d.shared.clone().filter(|_| self.shared),
                    binding: d.binding.clone().filter(|_| self.binding),
                    ..d.clone()
                })
                .collect(),
        )
    }

    /// Notes what the API server dropped of `sent` in `written`, logging each field once.
    pub(super) fn note(&mut self, sent: &ResourceSlice, written: &ResourceSlice) {
        let dropped = |count: fn(&ResourceSlice) -> usize| count(sent) > count(written);
        if self.counters && dropped(count_counters) {
            tracing::error!(
                "the API server dropped the counters graft wrote: enable the \
                 DRAPartitionableDevices feature gate (kube-apiserver, kube-scheduler, \
                 kubelet) for dynamic MIG; until then its placements are not offered"
            );
            self.counters = false;
        }
        if self.shared && dropped(count_shared) {
            tracing::error!(
                "the API server dropped allowMultipleAllocations: enable the \
                 DRAConsumableCapacity feature gate (kube-apiserver, kube-scheduler, \
                 kubelet) to share GPUs through MPS; until then they are offered whole"
            );
            self.shared = false;
        }
        if self.binding && dropped(count_binding) {
            tracing::warn!(
                "the API server dropped the binding conditions graft wrote: enable the \
                 DRADeviceBindingConditions feature gate (kube-apiserver, kube-scheduler) for \
                 pods to be bound only once their devices are ready (a ComputeDomain's IMEX \
                 daemon); until then they are bound at once and prepare waits"
            );
            self.binding = false;
        }
        if self.taints && dropped(count_taints) {
            tracing::warn!(
                "the API server dropped the device taints graft wrote: enable the \
                 DRADeviceTaints feature gate (kube-apiserver, kube-scheduler, \
                 kube-controller-manager) for unhealthy devices to stop receiving pods; \
                 until then health shows only in Events and pod status"
            );
            self.taints = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Binding, Kind};
    use k8s_openapi::api::resource::v1::{Device as ApiDevice, ResourceSliceSpec};

    fn slice(binding: bool, shared: bool) -> ResourceSlice {
        ResourceSlice {
            spec: ResourceSliceSpec {
                devices: Some(vec![ApiDevice {
                    name: "d".into(),
                    binding_conditions: binding.then(|| vec!["x/Ready".into()]),
                    allow_multiple_allocations: shared.then_some(true),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_dropped_field_is_no_longer_offered() {
        let mut d = Device::new("d", Kind::Channel);
        d.binding = Some(Binding {
            ready: vec!["x/Ready".into()],
            failed: vec!["x/Failed".into()],
        });
        d.shared = Some(Default::default());
        let devices = [d];
        let mut kept = Kept::default();
        assert!(matches!(kept.offered(&devices), Cow::Borrowed(_)));
        // Everything kept: nothing changes.
        kept.note(&slice(true, true), &slice(true, true));
        assert!(kept.binding && kept.shared);
        // The binding conditions came back without them: offered without from now on.
        kept.note(&slice(true, true), &slice(false, true));
        assert!(!kept.binding && kept.shared);
        let offered = kept.offered(&devices);
        assert!(offered[0].binding.is_none() && offered[0].shared.is_some());
    }
}
