//! The fake NVML's event feed through nvml-wrapper, as graft-driver's health monitor uses
//! it: tests append lines to `fake-nvml-events` next to the library and wait on event sets.
//!
//! Each test loads the library from its own fake node: a separate copy of the file, hence a
//! separate instance in this process, with its own sets and its own feed. No GPU, no root.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_integration::fake_gpu::{FakeNode, LIB_DIR};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{EventSet, Nvml};
use nvml_wrapper_sys::bindings::*;

const XID: u64 = nvmlEventTypeXidCriticalError as u64;
const ECC_SINGLE: u64 = nvmlEventTypeSingleBitEccError as u64;
const ECC_DOUBLE: u64 = nvmlEventTypeDoubleBitEccError as u64;
const UNAVAILABLE: u64 = nvmlEventTypeGpuUnavailableError as u64;
const RECOVERY: u64 = nvmlEventTypeGpuRecoveryAction as u64;

/// The fake node and NVML loaded from its driver root, as graft-driver loads it.
fn load(dir: &std::path::Path) -> anyhow::Result<(FakeNode, Nvml)> {
    let node = FakeNode::create(dir)?;
    let lib = node.host.join(&LIB_DIR[1..]).join("libnvidia-ml.so.1");
    let nvml = Nvml::builder()
        .lib_path(lib.as_os_str())
        .init()
        .with_context(|| format!("loading {}", lib.display()))?;
    Ok((node, nvml))
}

/// One wait on the raw call, which, unlike nvml-wrapper's `EventData`, keeps the instance
/// ids and event types the wrapper does not know.
fn raw_wait(nvml: &Nvml, set: &EventSet, ms: u32) -> Result<nvmlEventData_t, nvmlReturn_t> {
    // SAFETY: all-zero is a valid nvmlEventData_t (null handle, zero numbers).
    let mut data: nvmlEventData_t = unsafe { std::mem::zeroed() };
    // SAFETY: the set is live (borrowed) and `data` is a live local.
    let rc = unsafe { nvml.lib().nvmlEventSetWait_v2(set.handle(), &mut data, ms) };
    if rc == nvmlReturn_enum_NVML_SUCCESS {
        Ok(data)
    } else {
        Err(rc)
    }
}

/// Registers raw types (the wrapper's `EventTypes` lacks the newer ones) on GPU `index`.
fn register_raw(nvml: &Nvml, set: &EventSet, index: u32, types: u64) -> anyhow::Result<()> {
    let dev = nvml.device_by_index(index)?;
    // SAFETY: both handles are live, borrowed from their wrappers.
    let rc = unsafe {
        nvml.lib()
            .nvmlDeviceRegisterEvents(dev.handle(), types, set.handle())
    };
    ensure!(
        rc == nvmlReturn_enum_NVML_SUCCESS,
        "register {types:#x} on {index}: {rc}"
    );
    Ok(())
}

fn gpu_handle(nvml: &Nvml, index: u32) -> anyhow::Result<nvmlDevice_t> {
    // SAFETY: the handle is only compared.
    Ok(unsafe { nvml.device_by_index(index)?.handle() })
}

fn assert_timeout(set: &EventSet, ms: u32) {
    let started = Instant::now();
    match set.wait(ms) {
        Err(NvmlError::Timeout) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(ms.into()));
}

#[test]
fn registration() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (node, nvml) = load(dir.path())?;
    // No feed until a test writes one.
    assert!(!node.events_file().exists());

    let gpu = nvml.device_by_index(0)?;
    let mut supported = 0;
    // SAFETY: the handle is live and `supported` a live local.
    let rc = unsafe {
        nvml.lib()
            .nvmlDeviceGetSupportedEventTypes(gpu.handle(), &mut supported)
    };
    assert_eq!(rc, nvmlReturn_enum_NVML_SUCCESS);
    let pstate_clock = (nvmlEventTypePState | nvmlEventTypeClock) as u64;
    assert_eq!(
        supported,
        XID | ECC_SINGLE | ECC_DOUBLE | UNAVAILABLE | RECOVERY | pstate_clock
    );

    // MIG devices: events are registered on the parent.
    let mig = nvml.device_by_index(6)?.mig_device_by_index(0)?;
    assert!(matches!(
        mig.supported_event_types(),
        Err(NvmlError::NotSupported)
    ));
    let err = mig
        .register_events(EventTypes::CRITICAL_XID_ERROR, nvml.create_event_set()?)
        .err()
        .context("registering on a MIG device")?;
    assert!(matches!(err.error, NvmlError::NotSupported), "{err:?}");
    // Nothing supported asked for; then a mix, of which the supported part counts.
    let err = gpu
        .register_events(EventTypes::POWER_SOURCE_CHANGE, nvml.create_event_set()?)
        .err()
        .context("registering only unsupported types")?;
    assert!(matches!(err.error, NvmlError::NotSupported), "{err:?}");
    let set = gpu.register_events(
        EventTypes::CRITICAL_XID_ERROR | EventTypes::POWER_SOURCE_CHANGE,
        nvml.create_event_set()?,
    )?;

    assert_timeout(&set, 0);
    assert_timeout(&set, 100);
    // The file did not exist when the set was made: all of it is new.
    node.inject("0 xid 13")?;
    let ev = set.wait(2000)?;
    assert_eq!(ev.device.uuid()?, gpu.uuid()?);
    assert_eq!(ev.event_data, Some(XidError::Value(13)));

    // Unknown set handles are refused, not followed.
    // SAFETY: the fake never dereferences set handles.
    let rc = unsafe {
        nvml.lib()
            .nvmlEventSetFree(std::ptr::without_provenance_mut(usize::MAX))
    };
    assert_eq!(rc, nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
    Ok(())
}

#[test]
fn events_appended_after_creation_are_delivered() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (node, nvml) = load(dir.path())?;
    // Before the set: never seen.
    node.inject("0 xid 43")?;

    let mut set = nvml.create_event_set()?;
    let types = EventTypes::CRITICAL_XID_ERROR
        | EventTypes::DOUBLE_BIT_ECC_ERROR
        | EventTypes::SINGLE_BIT_ECC_ERROR;
    // GPU 5 gets XIDs only, GPU 7 nothing.
    for i in [0, 1, 2, 3, 4, 6] {
        set = nvml.device_by_index(i)?.register_events(types, set)?;
        register_raw(&nvml, &set, i, UNAVAILABLE | RECOVERY)?;
    }
    set = nvml
        .device_by_index(5)?
        .register_events(EventTypes::CRITICAL_XID_ERROR, set)?;
    assert_timeout(&set, 150);

    // Skipped: malformed, comments, blank, out of range.
    for bad in [
        "garbage",
        "# 0 xid 1",
        "",
        "9 xid 79",
        "0 xid",
        "0 xid 79 gi 1",
        "0 xid seventy-nine",
        "0 bogus",
        "0 recovery",
    ] {
        node.inject(bad)?;
    }
    node.inject("0 xid 79")?;
    let ev = set.wait(2000)?;
    assert_eq!(ev.device.uuid()?, nvml.device_by_index(0)?.uuid()?);
    assert_eq!(ev.event_type, EventTypes::CRITICAL_XID_ERROR);
    assert_eq!(ev.event_data, Some(XidError::Value(79)));

    node.inject("1 xid 94")?;
    let raw = raw_wait(&nvml, &set, 2000).map_err(|rc| anyhow::anyhow!("wait: {rc}"))?;
    assert_eq!(raw.device, gpu_handle(&nvml, 1)?);
    assert_eq!((raw.eventType, raw.eventData), (XID, 94));
    assert_eq!(
        (raw.gpuInstanceId, raw.computeInstanceId),
        (u32::MAX, u32::MAX)
    );

    // Attributed to a MIG instance of GPU 6: the event names the parent.
    node.inject("6 xid 31 gi 2 ci 0")?;
    let raw = raw_wait(&nvml, &set, 2000).map_err(|rc| anyhow::anyhow!("wait: {rc}"))?;
    assert_eq!(raw.device, gpu_handle(&nvml, 6)?);
    assert_eq!((raw.eventType, raw.eventData), (XID, 31));
    assert_eq!((raw.gpuInstanceId, raw.computeInstanceId), (2, 0));

    node.inject("2 ecc-double-bit")?;
    let ev = set.wait(2000)?;
    assert_eq!(ev.device.uuid()?, nvml.device_by_index(2)?.uuid()?);
    assert_eq!(ev.event_type, EventTypes::DOUBLE_BIT_ECC_ERROR);
    assert_eq!(ev.event_data, None);

    node.inject("3 unavailable")?;
    node.inject("4 recovery 2")?;
    let raw = raw_wait(&nvml, &set, 2000).map_err(|rc| anyhow::anyhow!("wait: {rc}"))?;
    assert_eq!(raw.device, gpu_handle(&nvml, 3)?);
    assert_eq!((raw.eventType, raw.eventData), (UNAVAILABLE, 0));
    let raw = raw_wait(&nvml, &set, 2000).map_err(|rc| anyhow::anyhow!("wait: {rc}"))?;
    assert_eq!(raw.device, gpu_handle(&nvml, 4)?);
    assert_eq!((raw.eventType, raw.eventData), (RECOVERY, 2));

    // Not registered: GPU 7 at all, GPU 5 for ECC.
    node.inject("7 xid 79")?;
    node.inject("5 ecc-single-bit")?;
    node.inject("5 xid 48")?;
    let ev = set.wait(2000)?;
    assert_eq!(ev.device.uuid()?, nvml.device_by_index(5)?.uuid()?);
    assert_eq!(ev.event_data, Some(XidError::Value(48)));

    // A line still being written waits for its newline.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(node.events_file())?;
    f.write_all(b"1 xid 62")?;
    assert_timeout(&set, 150);
    f.write_all(b"\n")?;
    let ev = set.wait(2000)?;
    assert_eq!(ev.event_data, Some(XidError::Value(62)));

    // A second set has its own start and its own reading.
    let other = nvml
        .device_by_index(0)?
        .register_events(EventTypes::CRITICAL_XID_ERROR, nvml.create_event_set()?)?;
    assert_timeout(&other, 100);
    node.inject("0 xid 45")?;
    for s in [&set, &other] {
        let ev = s.wait(2000)?;
        assert_eq!(ev.event_data, Some(XidError::Value(45)));
    }
    assert_timeout(&set, 50);
    assert_timeout(&other, 50);
    Ok(())
}

#[test]
fn lost_gpus_fail_every_per_device_call() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (node, nvml) = load(dir.path())?;
    let uuid = |i| -> anyhow::Result<String> { Ok(nvml.device_by_index(i)?.uuid()?) };
    let (gpu2, gpu3) = (uuid(2)?, uuid(3)?);
    let mig6 = nvml.device_by_index(6)?.mig_device_by_index(0)?;
    let mig6_uuid = mig6.uuid()?;
    let mig7 = nvml.device_by_index(7)?.mig_device_by_index(0)?.uuid()?;
    let lost = |u: &str| matches!(nvml.device_by_uuid(u), Err(NvmlError::GpuLost));
    for u in [&gpu2, &gpu3, &mig6_uuid, &mig7] {
        nvml.device_by_uuid(u.as_str())?;
    }
    assert!(matches!(
        nvml.device_by_uuid("GPU-00000000-0000-0000-0000-000000000000"),
        Err(NvmlError::NotFound)
    ));
    // Handles taken before the GPU was lost.
    let before = nvml.device_by_index(2)?;
    let set = before.register_events(EventTypes::CRITICAL_XID_ERROR, nvml.create_event_set()?)?;

    node.inject("2 lost")?;
    node.inject("3 lost please")?;
    assert!(lost(&gpu2));
    assert!(!lost(&gpu3), "a malformed line changes nothing");
    // Every lookup and every call on an old handle; the count still includes it.
    assert_eq!(nvml.device_count()?, 8);
    assert!(matches!(nvml.device_by_index(2), Err(NvmlError::GpuLost)));
    assert!(matches!(
        nvml.device_by_pci_bus_id("00000000:3A:00.0"),
        Err(NvmlError::GpuLost)
    ));
    assert!(matches!(before.uuid(), Err(NvmlError::GpuLost)));
    assert!(matches!(before.minor_number(), Err(NvmlError::GpuLost)));
    assert!(matches!(before.pci_info(), Err(NvmlError::GpuLost)));
    assert!(matches!(before.memory_info(), Err(NvmlError::GpuLost)));
    assert!(matches!(before.mig_mode(), Err(NvmlError::GpuLost)));
    assert!(matches!(
        before.supported_event_types(),
        Err(NvmlError::GpuLost)
    ));
    // An event set holding it: what was queued first, then GPU_IS_LOST.
    node.inject("2 xid 79")?;
    let ev = set.wait(2000)?;
    assert_eq!(ev.event_data, Some(XidError::Value(79)));
    assert!(matches!(set.wait(100), Err(NvmlError::GpuLost)));
    // The other GPUs are untouched.
    nvml.device_by_index(3)?.uuid()?;

    node.inject("6 lost")?;
    assert!(lost(&mig6_uuid), "a lost parent's MIG devices are lost");
    assert!(matches!(mig6.uuid(), Err(NvmlError::GpuLost)));
    assert!(matches!(mig6.attributes(), Err(NvmlError::GpuLost)));
    assert!(!lost(&mig7));
    // GPU and compute instance handles of it too.
    // SAFETY: the handle is live; the out pointer a live local.
    let mut gi = std::ptr::null_mut();
    let rc = unsafe {
        nvml.lib()
            .nvmlDeviceGetGpuInstanceById(nvml.device_by_index(7)?.handle(), 1, &mut gi)
    };
    assert_eq!(rc, nvmlReturn_enum_NVML_SUCCESS);
    node.inject("7 lost")?;
    // SAFETY: as above; the info is a live local.
    let mut info: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
    let rc = unsafe { nvml.lib().nvmlGpuInstanceGetInfo(gi, &mut info) };
    assert_eq!(rc, nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST);
    node.inject("7 found")?;
    // SAFETY: as above.
    let rc = unsafe { nvml.lib().nvmlGpuInstanceGetInfo(gi, &mut info) };
    assert_eq!(rc, nvmlReturn_enum_NVML_SUCCESS);

    // Found again: the last line for each GPU wins.
    node.inject("2 found")?;
    assert_eq!(nvml.device_by_uuid(gpu2.as_str())?.uuid()?, gpu2);
    assert_eq!(before.uuid()?, gpu2);
    assert!(lost(&mig6_uuid));
    node.inject("6 found")?;
    nvml.device_by_uuid(mig6_uuid.as_str())?;
    Ok(())
}

/// `nvmlDeviceGetFieldValues` for the recovery action, raw (nvml-wrapper's field ids stop
/// before it): the value and its own status.
fn recovery_action(nvml: &Nvml, index: u32, field: u32) -> anyhow::Result<(nvmlReturn_t, u32)> {
    let dev = nvml.device_by_index(index)?;
    // SAFETY: an all-zero field value is valid; the handle is live; one value, one entry.
    let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
    v.fieldId = field;
    let rc = unsafe { nvml.lib().nvmlDeviceGetFieldValues(dev.handle(), 1, &mut v) };
    ensure!(rc == nvmlReturn_enum_NVML_SUCCESS, "field values: {rc}");
    // SAFETY: the fake fills uiVal (NVML_VALUE_TYPE_UNSIGNED_INT) when it succeeds.
    Ok((v.nvmlReturn, unsafe { v.value.uiVal }))
}

/// `nvmlDeviceGetRemappedRows`: (uncorrectable, pending, failed) or the call's error.
fn remapped(nvml: &Nvml, index: u32) -> anyhow::Result<Result<(u32, u32, u32), nvmlReturn_t>> {
    let dev = nvml.device_by_index(index)?;
    let (mut c, mut u, mut p, mut f) = (0, 0, 0, 0);
    // SAFETY: live handle, live out pointers.
    let rc = unsafe {
        nvml.lib()
            .nvmlDeviceGetRemappedRows(dev.handle(), &mut c, &mut u, &mut p, &mut f)
    };
    Ok(if rc == nvmlReturn_enum_NVML_SUCCESS {
        Ok((u, p, f))
    } else {
        Err(rc)
    })
}

#[test]
fn recovery_action_remapped_rows_and_retired_pages() -> anyhow::Result<()> {
    use nvml_wrapper_sys::bindings::field_id::*;
    let dir = tempfile::tempdir()?;
    let (node, nvml) = load(dir.path())?;
    let field = NVML_FI_DEV_GET_GPU_RECOVERY_ACTION;
    assert_eq!(
        recovery_action(&nvml, 1, field)?,
        (nvmlReturn_enum_NVML_SUCCESS, 0)
    );
    node.inject("1 recovery 1")?;
    node.inject("2 recovery 2")?;
    assert_eq!(
        recovery_action(&nvml, 1, field)?,
        (nvmlReturn_enum_NVML_SUCCESS, 1)
    );
    assert_eq!(recovery_action(&nvml, 2, field)?.1, 2);
    node.inject("1 recovery 0")?;
    assert_eq!(recovery_action(&nvml, 1, field)?.1, 0);
    // Another field: the value says it is not supported, the call succeeds.
    assert_eq!(
        recovery_action(&nvml, 1, NVML_FI_DEV_ECC_CURRENT)?.0,
        nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED
    );

    assert_eq!(remapped(&nvml, 1)?, Ok((0, 0, 0)));
    node.inject("1 remap-pending")?;
    assert_eq!(remapped(&nvml, 1)?, Ok((1, 1, 0)));
    node.inject("1 remap-failed")?;
    assert_eq!(remapped(&nvml, 1)?, Ok((1, 0, 1)));
    node.inject("1 remap-clear")?;
    assert_eq!(remapped(&nvml, 1)?, Ok((0, 0, 0)));
    // MIG on with instances (GPU 6): not supported, as the reference notes.
    assert_eq!(
        remapped(&nvml, 6)?,
        Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)
    );
    // Hopper remaps rows instead of retiring pages.
    assert!(matches!(
        nvml.device_by_index(1)?.are_pages_pending_retired(),
        Err(NvmlError::NotSupported)
    ));

    // A lost GPU fails them all.
    let gpu = nvml.device_by_index(3)?;
    node.inject("3 lost")?;
    let mut v: nvmlFieldValue_t = unsafe { std::mem::zeroed() };
    v.fieldId = field;
    // SAFETY: live handle, one live value.
    let rc = unsafe { nvml.lib().nvmlDeviceGetFieldValues(gpu.handle(), 1, &mut v) };
    assert_eq!(rc, nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST);
    assert!(matches!(
        gpu.are_pages_pending_retired(),
        Err(NvmlError::GpuLost)
    ));
    Ok(())
}

#[test]
fn inject_takes_one_line() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let node = FakeNode::create(dir.path())?;
    assert!(node.inject("0 xid 1\n1 xid 2").is_err());
    node.inject("0 xid 1")?;
    node.inject("1 lost")?;
    assert_eq!(
        std::fs::read_to_string(node.events_file())?,
        "0 xid 1\n1 lost\n"
    );
    Ok(())
}
