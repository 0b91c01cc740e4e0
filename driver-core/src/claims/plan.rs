//! Deciding what preparing one claim takes, under the checkpoint's lock, before anything is
//! done: the devices it gets, their configuration and setups, the record graft-nri will
//! read, and the check that no device goes to two claims.

use std::collections::BTreeMap;

use graft_record::{ClaimRecord, ClaimRef, DeviceRecord, EnvVar};

use super::checkpoint::{ClaimEntry, ClaimState, PreparedDevice, Txn};
use super::config_edits::{apply_config, share_config_env};
use super::engine::{Core, CoreResult};
use super::input::{ClaimError, ClaimInput};
use super::lifecycle::{Stage, Step};
use crate::claims::setup_port::{DeviceSetup, PciUse};
use crate::mapping::base_request;
use crate::model::{Attribute, Device};
use crate::opaque;

/// What one claim of a prepare call needs.
pub(super) enum Planned {
    /// Already prepared; these are its devices.
    Done(Vec<PreparedDevice>),
    New(Box<Plan>),
}

pub(super) struct Plan {
    pub uid: String,
    pub entry: ClaimEntry,
    pub record: ClaimRecord,
}

impl Plan {
    pub fn span(&self) -> tracing::Span {
        super::engine::claim_span(&self.entry.namespace, &self.entry.name, &self.uid)
    }

    /// The claim as `namespace/name`.
    pub fn claim(&self) -> String {
        format!("{}/{}", self.entry.namespace, self.entry.name)
    }

    pub fn device_names(&self) -> Vec<String> {
        self.entry
            .devices
            .iter()
            .map(|d| d.device.clone())
            .collect()
    }
}

impl Core {
    /// Decides what preparing `input` takes. `earlier` are the claims planned before it in
    /// the same call, so two claims of one batch cannot take the same device. A completed
    /// claim is refreshed; an interrupted one is rolled back first.
    pub(super) fn plan_one(
        &self,
        txn: &mut Txn,
        inventory: &BTreeMap<String, Device>,
        input: &ClaimInput,
        earlier: &[Plan],
    ) -> CoreResult<Result<Planned, ClaimError>> {
        let id = &input.id;
        let uid = id.uid.as_str();
        if !input.pod_errors.is_empty() {
            return Ok(Err(ClaimError::PodsUnreadable(input.pod_errors.clone())));
        }
        if let Some(entry) = txn.get(uid).cloned() {
            let stage: Stage = entry.state.into();
            if stage == Stage::Completed {
                match self.store.get_claim(uid) {
                    Ok(Some(rec)) => {
                        // Idempotent: same devices; the pod and container mapping is
                        // refreshed, so a shared claim gains its new pods.
                        Self::step(uid, stage, Step::Refresh)?;
                        let rec = Self::with_pods(rec, input);
                        if let Err(e) = self.store.put_claim(&rec) {
                            return Ok(Err(Self::local(id, e)));
                        }
                        return Ok(Ok(Planned::Done(entry.devices)));
                    }
                    Ok(None) => {
                        Self::step(uid, stage, Step::Redo)?;
                        tracing::warn!(claim = %id, "completed claim has no record; preparing again");
                    }
                    Err(e) => return Ok(Err(Self::local(id, e))),
                }
            } else {
                Self::step(uid, stage, Step::RollBack)?;
                tracing::info!(claim = %id, "rolling back an interrupted prepare");
            }
            // The claim's own devices: reserved for it, so their locks are free unless a
            // shared device is being set up for another claim. No waiting while the
            // checkpoint is locked: busy devices fail the claim and the kubelet retries.
            let names: Vec<String> = entry.devices.iter().map(|d| d.device.clone()).collect();
            let undone = self
                .lock_devices(uid, &names, std::time::Instant::now())
                .and_then(|_g| self.undo_setups(&entry));
            if let Err(e) = undone {
                return Ok(Err(e));
            }
            if let Err(e) = self.store.remove_claim(uid) {
                return Ok(Err(Self::local(id, e)));
            }
            if let Err(e) = txn.remove(uid) {
                return Ok(Err(Self::local(id, e)));
            }
        }
        Ok(self.plan_new(txn, inventory, input, earlier))
    }

    fn plan_new(
        &self,
        txn: &Txn,
        inventory: &BTreeMap<String, Device>,
        input: &ClaimInput,
        earlier: &[Plan],
    ) -> Result<Planned, ClaimError> {
        let id = &input.id;
        // One per distinct device, requests merged.
        let mut planned: Vec<PreparedDevice> = Vec::new();
        let mut records: Vec<DeviceRecord> = Vec::new();
        // The variables each record's configuration adds, in `records` order.
        let mut config_env: Vec<Vec<EnvVar>> = Vec::new();
        for r in &input.results {
            let base = base_request(&r.request).to_string();
            if r.pool != self.node_name {
                return Err(ClaimError::NotInPool {
                    pool: r.pool.clone(),
                    device: r.device.clone(),
                    request: r.request.clone(),
                    node: self.node_name.clone(),
                });
            }
            if let Some(p) = planned
                .iter_mut()
                .find(|p| p.device == r.device && p.pool == r.pool)
            {
                if !p.requests.contains(&base) {
                    p.requests.push(base.clone());
                }
                if let Some(rec) = records.iter_mut().find(|d| d.name == r.device) {
                    if !rec.requests.contains(&base) {
                        rec.requests.push(base);
                    }
                }
                continue;
            }
            let dev = inventory
                .get(&r.device)
                .ok_or_else(|| ClaimError::NotPresent {
                    device: r.device.clone(),
                    request: r.request.clone(),
                    node: self.node_name.clone(),
                })?;
            let config =
                opaque::resolve(&self.driver_name, &input.configs, &r.request, &self.opaque)?;
            let refused = |source| ClaimError::SetupRefused {
                request: r.request.clone(),
                source,
            };
            let setup = match self.setup.plan(dev, config.as_ref(), r).map_err(refused)? {
                Some(s) => Some(
                    self.setup
                        .for_claim(s, &id.namespace, &id.uid)
                        .map_err(refused)?,
                ),
                None => None,
            };
            let sharing = config.as_ref().and_then(|c| c.family.asks_sharing());
            if let (None, Some(sharing)) = (&setup, sharing) {
                return Err(ClaimError::CannotShare {
                    request: r.request.clone(),
                    device: r.device.clone(),
                    sharing,
                });
            }
            let (edits, env) =
                apply_config(dev, config.as_ref()).map_err(|source| ClaimError::Configure {
                    request: r.request.clone(),
                    device: r.device.clone(),
                    source,
                })?;
            config_env.push(env);
            records.push(DeviceRecord {
                name: r.device.clone(),
                pool: r.pool.clone(),
                requests: vec![base.clone()],
                edits,
            });
            planned.push(PreparedDevice {
                pool: r.pool.clone(),
                device: r.device.clone(),
                requests: vec![base],
                share_id: r.share_id.clone(),
                admin_access: r.admin_access,
                setup,
            });
        }

        // The last line of defence against a double assignment.
        let batch = earlier.iter().map(|p| (&p.uid, &p.entry));
        for p in planned.iter().filter(|p| !p.admin_access) {
            for (other_uid, other) in txn.claims().iter().chain(batch.clone()) {
                if other_uid == &id.uid {
                    continue;
                }
                let holder = || format!("{}/{}", other.namespace, other.name);
                for o in &other.devices {
                    if o.device == p.device
                        && o.pool == p.pool
                        && !o.admin_access
                        && !(o.share_id.is_some() && p.share_id.is_some())
                    {
                        return Err(ClaimError::AlreadyPrepared {
                            device: p.device.clone(),
                            holder: holder(),
                            holder_uid: other_uid.clone(),
                        });
                    }
                    if let Some(clash) = contested(self.setup.as_ref(), inventory, o, p) {
                        return Err(clash.refusal(p, o, holder(), other_uid));
                    }
                    if let (Some(a), Some(b)) = (&p.setup, &o.setup) {
                        if let Some(source) = self.setup.excludes(a, b) {
                            return Err(ClaimError::Setup {
                                device: p.device.clone(),
                                source,
                            });
                        }
                    }
                }
            }
        }
        // Nor within the claim: a GPU passed through cannot also be one of its GPUs.
        for (i, p) in planned.iter().enumerate() {
            for o in &planned[i + 1..] {
                if let Some(clash) = contested(self.setup.as_ref(), inventory, o, p) {
                    return Err(clash.refusal(p, o, format!("{id}"), &id.uid));
                }
            }
        }

        let entry = ClaimEntry {
            state: ClaimState::PrepareStarted,
            namespace: id.namespace.clone(),
            name: id.name.clone(),
            devices: planned,
        };
        let env = share_config_env(&mut records, config_env);
        let mut record = ClaimRecord {
            version: 0,
            claim: ClaimRef {
                uid: id.uid.clone(),
                namespace: id.namespace.clone(),
                name: id.name.clone(),
            },
            devices: records,
            env,
            pods: Vec::new(),
        };
        record.version = record.needed_version();
        Ok(Planned::New(Box::new(Plan {
            uid: id.uid.clone(),
            entry,
            record: Self::with_pods(record, input),
        })))
    }
}

/// The PCI functions a prepared device uses: those its setup uses (those its passthrough
/// takes from the host: the GPU and the rest of its IOMMU group), or its GPU's.
fn functions(
    inventory: &BTreeMap<String, Device>,
    d: &PreparedDevice,
    used: Option<PciUse>,
) -> Vec<String> {
    if let Some(u) = used.filter(|u| !u.functions.is_empty()) {
        return u.functions;
    }
    match inventory
        .get(&d.device)
        .and_then(|dev| dev.attributes.get(graft_api::attributes::PCI_BUS_ID))
    {
        Some(Attribute::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    }
}

/// Two prepared devices that need one PCI function, where one passes it through: `function`,
/// and whether it is both devices' own (the same GPU offered twice) rather than one's group
/// peer.
struct Contested {
    function: String,
    same_gpu: bool,
}

/// The one rule for passthrough against every other use of a function: a function a
/// passthrough takes from the host (a GPU, or a peer in its IOMMU group) goes to no other
/// device while it is prepared, whichever claim came first.
fn contested(
    setups: &dyn DeviceSetup,
    inventory: &BTreeMap<String, Device>,
    a: &PreparedDevice,
    b: &PreparedDevice,
) -> Option<Contested> {
    if a.device == b.device {
        return None;
    }
    let used = |d: &PreparedDevice| d.setup.as_ref().and_then(|s| setups.pci(s));
    let (ua, ub) = (used(a), used(b));
    let passthrough = |u: &Option<PciUse>| u.as_ref().is_some_and(|u| u.passthrough);
    if !(passthrough(&ua) || passthrough(&ub)) {
        return None;
    }
    let (fa, fb) = (functions(inventory, a, ua), functions(inventory, b, ub));
    let function = fb.iter().find(|f| fa.contains(f))?.clone();
    Some(Contested {
        same_gpu: fa.first() == Some(&function) && fb.first() == Some(&function),
        function,
    })
}

impl Contested {
    /// Why `p` is refused while `o`, of claim `holder`, is prepared.
    fn refusal(
        self,
        p: &PreparedDevice,
        o: &PreparedDevice,
        holder: String,
        holder_uid: &str,
    ) -> ClaimError {
        if self.same_gpu {
            return ClaimError::AlreadyPrepared {
                device: p.device.clone(),
                holder,
                holder_uid: holder_uid.to_string(),
            };
        }
        ClaimError::Setup {
            device: p.device.clone(),
            source: crate::claims::setup_port::SetupError::FunctionHeld {
                function: self.function,
                holder: format!("{holder} ({holder_uid})"),
                holder_device: o.device.clone(),
            },
        }
    }
}
