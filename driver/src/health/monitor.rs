//! The GPU health monitor: one blocking thread that registers NVML events for every GPU
//! the node publishes, waits for them, probes each GPU now and then, and publishes the
//! resulting [`HealthReport`].
//!
//! Events are registered on whole GPUs (NVML does not take MIG device handles); an event
//! NVML attributes to a GPU instance lands on that instance's MIG devices only, any other
//! on every device of the GPU (the whole GPU, its MIG devices, its passthrough function).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{EventSet, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlEventData_t, nvmlEventTypeDoubleBitEccError, nvmlEventTypeGpuRecoveryAction,
    nvmlEventTypeGpuUnavailableError, nvmlEventTypeXidCriticalError,
    nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST, nvmlReturn_enum_NVML_ERROR_TIMEOUT,
    nvmlReturn_enum_NVML_SUCCESS,
};
use tokio::sync::watch;

use super::classify::{classify, Signal, Verdict};
use super::state::Tracker;
use super::HealthReport;
use crate::discovery::{Device, Kind};

/// The events graft acts on. Single-bit ECC errors are corrected by the hardware and come
/// in storms; clock and power-state changes say nothing about health.
const WANTED: u64 = (nvmlEventTypeXidCriticalError
    | nvmlEventTypeDoubleBitEccError
    | nvmlEventTypeGpuUnavailableError
    | nvmlEventTypeGpuRecoveryAction) as u64;

/// How long one wait for events blocks: also how soon inventory changes are noticed.
const WAIT_MS: u32 = 500;

/// NVML's "no instance" in event data.
const NO_INSTANCE: u32 = u32::MAX;

#[derive(Debug, Clone)]
pub struct MonitorConfig {
    /// libnvidia-ml.so.1 as this process loads it.
    pub nvml_lib: PathBuf,
    pub informational_xids: BTreeSet<u64>,
    /// See [`Tracker::new`].
    pub quiet: Option<Duration>,
    /// How often every GPU is asked whether NVML can still reach it.
    pub probe_every: Duration,
}

/// The UUID of the GPU a device is (part of): its own for a whole GPU or its passthrough
/// function, its parent's for a MIG device.
fn gpu_of(d: &Device) -> Option<&str> {
    match d.kind {
        Kind::Gpu | Kind::Vfio => d.string_attribute("uuid"),
        Kind::Mig => d.string_attribute("parentUUID"),
        _ => None,
    }
}

/// The published devices a signal on GPU `uuid` lands on; `gi`/`ci` narrow it to one MIG
/// GPU instance (and compute instance) when NVML attributed the event.
pub fn targets(devices: &[Device], uuid: &str, gi: Option<u32>, ci: Option<u32>) -> Vec<String> {
    let id = |d: &Device, k: &str| d.int_attribute(k).and_then(|i| u32::try_from(i).ok());
    devices
        .iter()
        .filter(|d| gpu_of(d) == Some(uuid))
        .filter(|d| match d.kind {
            Kind::Mig => {
                gi.is_none_or(|g| id(d, "giID") == Some(g))
                    && ci.is_none_or(|c| id(d, "ciID") == Some(c))
            }
            // An event NVML attributed to an instance is not the whole GPU's.
            _ => gi.is_none(),
        })
        .map(|d| d.name.clone())
        .collect()
}

/// The GPUs (by UUID) behind the published devices.
fn gpu_uuids(devices: &[Device]) -> BTreeSet<String> {
    devices
        .iter()
        .filter_map(|d| gpu_of(d).map(str::to_string))
        .collect()
}

/// Starts the monitor thread. It ends when every receiver of `out` is gone.
pub fn spawn(
    config: MonitorConfig,
    inventory: watch::Receiver<Vec<Device>>,
    out: watch::Sender<HealthReport>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("gpu-health".into())
        .spawn(move || run(config, inventory, out))
}

fn run(
    config: MonitorConfig,
    mut inventory: watch::Receiver<Vec<Device>>,
    out: watch::Sender<HealthReport>,
) {
    let mut tracker = Tracker::new(config.quiet);
    while !out.is_closed() {
        match Nvml::builder()
            .lib_path(OsStr::new(config.nvml_lib.as_os_str()))
            .init()
        {
            Ok(nvml) => watch_events(&config, &nvml, &mut inventory, &out, &mut tracker),
            Err(e) => tracing::warn!(
                lib = %config.nvml_lib.display(), error = %e,
                "GPU health: cannot load NVML; trying again in 30 s"
            ),
        }
        if !out.is_closed() {
            std::thread::sleep(Duration::from_secs(30));
        }
    }
}

/// The GPUs registered in one event set, by raw handle.
struct Registered<'n> {
    set: EventSet<'n>,
    handles: BTreeMap<usize, String>,
}

fn register<'n>(nvml: &'n Nvml, uuids: &BTreeSet<String>) -> Result<Registered<'n>, NvmlError> {
    let set = nvml.create_event_set()?;
    let reg = nvml
        .lib()
        .nvmlDeviceRegisterEvents
        .as_ref()
        .map_err(|_| NvmlError::FailedToLoadSymbol("nvmlDeviceRegisterEvents".into()))?;
    let mut handles = BTreeMap::new();
    for uuid in uuids {
        let d = match nvml.device_by_uuid(uuid.as_str()) {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(gpu = uuid, error = %e, "GPU health: no NVML handle; its events are not watched");
                continue;
            }
        };
        let types = supported_types(nvml, &d).unwrap_or(WANTED) & WANTED;
        // SAFETY: the handle and the set are live NVML objects of this library instance;
        // registering does not take ownership of either. Called raw because the wrapper's
        // version consumes the set on failure, which would drop every GPU's registration.
        let rc = unsafe { reg(d.handle(), types, set.handle()) };
        if rc != nvmlReturn_enum_NVML_SUCCESS {
            tracing::warn!(
                gpu = uuid,
                code = rc,
                "GPU health: NVML refused event registration; this GPU is only probed"
            );
            continue;
        }
        // SAFETY: the raw handle is only compared with event data, never dereferenced here.
        handles.insert(unsafe { d.handle() } as usize, uuid.clone());
    }
    tracing::info!(gpus = handles.len(), "GPU health: watching NVML events");
    Ok(Registered { set, handles })
}

/// The event types NVML supports on `d`, raw: the wrapper drops bits it does not know
/// (GPU-unavailable and recovery-action among them).
fn supported_types(nvml: &Nvml, d: &nvml_wrapper::Device<'_>) -> Option<u64> {
    let f = nvml.lib().nvmlDeviceGetSupportedEventTypes.as_ref().ok()?;
    let mut types: u64 = 0;
    // SAFETY: symbol resolved; live handle; valid out pointer.
    let rc = unsafe { f(d.handle(), &mut types) };
    (rc == nvmlReturn_enum_NVML_SUCCESS).then_some(types)
}

enum Waited {
    Event {
        uuid: String,
        signal: Signal,
        gi: Option<u32>,
        ci: Option<u32>,
    },
    Nothing,
    Lost,
}

fn wait(nvml: &Nvml, r: &Registered<'_>) -> Result<Waited, String> {
    let f = nvml
        .lib()
        .nvmlEventSetWait_v2
        .as_ref()
        .map_err(|_| "nvmlEventSetWait_v2 is missing".to_string())?;
    // SAFETY: zeroed plain C struct, filled by NVML; the set is live for this call.
    let mut data: nvmlEventData_t = unsafe { std::mem::zeroed() };
    let rc = unsafe { f(r.set.handle(), &mut data, WAIT_MS) };
    match rc {
        x if x == nvmlReturn_enum_NVML_SUCCESS => {}
        x if x == nvmlReturn_enum_NVML_ERROR_TIMEOUT => return Ok(Waited::Nothing),
        x if x == nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST => return Ok(Waited::Lost),
        x => return Err(format!("NVML event wait failed with code {x}")),
    }
    let Some(uuid) = r.handles.get(&(data.device as nvmlDevice_t as usize)) else {
        return Ok(Waited::Nothing);
    };
    let t = data.eventType;
    let signal = if t & u64::from(nvmlEventTypeXidCriticalError) != 0 {
        Signal::Xid(data.eventData)
    } else if t & u64::from(nvmlEventTypeDoubleBitEccError) != 0 {
        Signal::DoubleBitEcc
    } else if t & u64::from(nvmlEventTypeGpuUnavailableError) != 0 {
        Signal::Unavailable
    } else if t & u64::from(nvmlEventTypeGpuRecoveryAction) != 0 {
        Signal::RecoveryAction(data.eventData)
    } else {
        return Ok(Waited::Nothing);
    };
    let id = |v: u32| (v != NO_INSTANCE).then_some(v);
    Ok(Waited::Event {
        uuid: uuid.clone(),
        signal,
        gi: id(data.gpuInstanceId),
        ci: id(data.computeInstanceId),
    })
}

/// Runs until `out` has no receivers (returns) or NVML stops working (returns; the caller
/// loads it again).
fn watch_events(
    config: &MonitorConfig,
    nvml: &Nvml,
    inventory: &mut watch::Receiver<Vec<Device>>,
    out: &watch::Sender<HealthReport>,
    tracker: &mut Tracker,
) {
    let mut devices = inventory.borrow_and_update().clone();
    let mut uuids = gpu_uuids(&devices);
    let mut registered = match register(nvml, &uuids) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "GPU health: cannot create an NVML event set");
            return;
        }
    };
    let mut last_probe: Option<Instant> = None;
    let mut failures = 0u32;
    while !out.is_closed() {
        let mut changed = false;
        if inventory.has_changed().unwrap_or(false) {
            devices = inventory.borrow_and_update().clone();
            let now_uuids = gpu_uuids(&devices);
            if now_uuids != uuids {
                uuids = now_uuids;
                match register(nvml, &uuids) {
                    Ok(r) => registered = r,
                    Err(e) => {
                        tracing::warn!(error = %e, "GPU health: cannot create an NVML event set");
                        return;
                    }
                }
            }
            changed |= tracker.retain(|n| devices.iter().any(|d| d.name == n));
        }
        let mut probe_now = false;
        match wait(nvml, &registered) {
            Ok(Waited::Event {
                uuid,
                signal,
                gi,
                ci,
            }) => {
                failures = 0;
                let verdict = classify(signal, &config.informational_xids);
                if verdict == Verdict::Recovered {
                    // A GPU the driver calls fine may have been lost: see that NVML
                    // reaches it before believing it.
                    let one = BTreeSet::from([uuid.clone()]);
                    changed |= probe(nvml, config, &devices, &one, tracker);
                }
                let now = SystemTime::now();
                for t in targets(&devices, &uuid, gi, ci) {
                    tracing::warn!(
                        device = t,
                        gpu = uuid,
                        ?signal,
                        ?gi,
                        ?ci,
                        "GPU health event"
                    );
                    changed |= tracker.observe(&t, &verdict, now);
                }
            }
            Ok(Waited::Nothing) => failures = 0,
            Ok(Waited::Lost) => probe_now = true,
            Err(e) => {
                failures += 1;
                tracing::warn!(error = e, "GPU health: waiting for events failed");
                if failures >= 10 {
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        if probe_now || last_probe.is_none_or(|t| t.elapsed() >= config.probe_every) {
            last_probe = Some(Instant::now());
            changed |= probe(nvml, config, &devices, &uuids, tracker);
        }
        changed |= tracker.tick(SystemTime::now());
        if changed {
            let report = tracker.report();
            log_changes(&out.borrow(), &report);
            out.send_replace(report);
        }
    }
}

/// One registration and one wait, for node checks: how many of the devices' GPUs NVML
/// registered for events, out of how many, after a wait of `WAIT_MS` that must end in a
/// timeout or an event. Never injects anything.
pub fn check_events(lib: &std::path::Path, devices: &[Device]) -> Result<(usize, usize), String> {
    let nvml = Nvml::builder()
        .lib_path(OsStr::new(lib.as_os_str()))
        .init()
        .map_err(|e| format!("loading {}: {e}", lib.display()))?;
    let uuids = gpu_uuids(devices);
    let r = register(&nvml, &uuids).map_err(|e| format!("event set: {e}"))?;
    match wait(&nvml, &r)? {
        Waited::Lost => Err("NVML reports a GPU lost".into()),
        Waited::Event { .. } | Waited::Nothing => Ok((r.handles.len(), uuids.len())),
    }
}

/// Asks NVML for each GPU: lost ones become unhealthy, reachable ones may recover.
fn probe(
    nvml: &Nvml,
    config: &MonitorConfig,
    devices: &[Device],
    uuids: &BTreeSet<String>,
    tracker: &mut Tracker,
) -> bool {
    let now = SystemTime::now();
    let lost = classify(Signal::Lost, &config.informational_xids);
    let mut changed = false;
    for uuid in uuids {
        let targets = targets(devices, uuid, None, None);
        match nvml.device_by_uuid(uuid.as_str()) {
            Err(NvmlError::GpuLost) => {
                for t in &targets {
                    changed |= tracker.observe(t, &lost, now);
                }
            }
            // Other errors (a GPU bound to vfio-pci is invisible to NVML) say nothing.
            Err(_) => {}
            Ok(_) => {
                for t in &targets {
                    tracker.reachable(t, now);
                }
            }
        }
    }
    changed
}

fn log_changes(before: &HealthReport, after: &HealthReport) {
    for (name, h) in &after.devices {
        if before.get(name) != Some(h) {
            tracing::warn!(device = name, condition = ?h.condition, reason = h.reason, "{}", h.message);
        }
    }
    for name in before.devices.keys() {
        if after.get(name).is_none() {
            tracing::info!(device = name, "device healthy again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::Attribute;

    fn dev(name: &str, kind: Kind, attrs: &[(&str, Attribute)]) -> Device {
        Device {
            name: name.into(),
            kind,
            attributes: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            capacity: Default::default(),
            edits: Default::default(),
            optional_edits: Default::default(),
            consumes: None,
            shared: None,
        }
    }

    #[test]
    fn signals_land_on_the_gpu_its_mig_devices_and_its_passthrough_function() {
        let s = |v: &str| Attribute::String(v.into());
        let devices = vec![
            dev("gpu-2", Kind::Gpu, &[("uuid", s("GPU-a"))]),
            dev("gpu-3", Kind::Gpu, &[("uuid", s("GPU-b"))]),
            dev("vfio-0000-18-00-0", Kind::Vfio, &[("uuid", s("GPU-a"))]),
            dev(
                "gpu-4-mig-1-0",
                Kind::Mig,
                &[
                    ("parentUUID", s("GPU-c")),
                    ("giID", Attribute::Int(1)),
                    ("ciID", Attribute::Int(0)),
                ],
            ),
            dev(
                "gpu-4-mig-2-0",
                Kind::Mig,
                &[
                    ("parentUUID", s("GPU-c")),
                    ("giID", Attribute::Int(2)),
                    ("ciID", Attribute::Int(0)),
                ],
            ),
            dev("fuse", Kind::Char, &[("uuid", s("GPU-a"))]),
        ];
        assert_eq!(
            targets(&devices, "GPU-a", None, None),
            ["gpu-2", "vfio-0000-18-00-0"]
        );
        assert_eq!(
            targets(&devices, "GPU-c", None, None),
            ["gpu-4-mig-1-0", "gpu-4-mig-2-0"]
        );
        assert_eq!(targets(&devices, "GPU-c", Some(2), None), ["gpu-4-mig-2-0"]);
        assert_eq!(
            targets(&devices, "GPU-c", Some(2), Some(1)),
            Vec::<String>::new()
        );
        assert!(targets(&devices, "GPU-z", None, None).is_empty());
        assert_eq!(
            gpu_uuids(&devices).into_iter().collect::<Vec<_>>(),
            ["GPU-a", "GPU-b", "GPU-c"]
        );
    }
}
