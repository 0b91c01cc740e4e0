//! NVML event sets over the feed tests write (its format is in the `feed` module). As with
//! the real library, an event set sees only the events appended after its creation, and
//! only those of the GPUs and types registered in it.

use std::collections::HashMap;
use std::ffi::{c_char, c_uint, c_ulonglong, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use nvml_wrapper_sys::bindings::*;

use super::*;
use crate::feed::{
    events_file, lines_from, parse, Line, ECC_DOUBLE, ECC_SINGLE, RECOVERY, UNAVAILABLE, XID,
};
use crate::health::{self, GPU_IS_LOST};

const TIMEOUT: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_TIMEOUT;

/// How often a waiting set looks at the file again.
const POLL: Duration = Duration::from_millis(20);

/// What an H100 reports: the types the feed has, plus PState and Clock (never fed).
const SUPPORTED: c_ulonglong = XID
    | ECC_SINGLE
    | ECC_DOUBLE
    | UNAVAILABLE
    | RECOVERY
    | nvmlEventTypePState as c_ulonglong
    | nvmlEventTypeClock as c_ulonglong;

struct SetState {
    /// Where the unread part of the file starts.
    offset: u64,
    /// Registered event types, by GPU index.
    registered: [c_ulonglong; 8],
}

/// Event sets by handle. Handles are numbers from `NEXT_SET`, never dereferenced.
static SETS: LazyLock<Mutex<HashMap<usize, SetState>>> = LazyLock::new(Default::default);
static NEXT_SET: AtomicUsize = AtomicUsize::new(1);

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    if uuid.is_null() {
        return INVALID_ARGUMENT;
    }
    let want = CStr::from_ptr(uuid).to_string_lossy();
    let (gpu, handle) = if let Some(i) = (0..8).find(|&i| gpu_uuid(i) == want) {
        (i, handle_of_gpu(i))
    } else if want.starts_with("MIG-") {
        // Only the MIG devices that exist now.
        let (config, state) = match mig::now() {
            Ok(now) => now,
            Err(rc) => return rc,
        };
        match (0..8)
            .flat_map(|gpu| mig::devices_of(&config, &state, gpu))
            .find(|&inst| mig_uuid(inst) == want)
        {
            Some(inst) => (inst.gpu, handle_of_mig(inst)),
            None => return NOT_FOUND,
        }
    } else {
        return NOT_FOUND;
    };
    if health::lost(gpu) {
        return GPU_IS_LOST;
    }
    put(device, handle)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) -> nvmlReturn_t {
    if set.is_null() {
        return INVALID_ARGUMENT;
    }
    // Only what is appended from now on is seen; an absent file is read from its start.
    let offset = events_file()
        .and_then(|p| std::fs::metadata(p).ok())
        .map_or(0, |m| m.len());
    let id = NEXT_SET.fetch_add(1, Ordering::Relaxed);
    let Ok(mut sets) = SETS.lock() else {
        return UNKNOWN;
    };
    sets.insert(
        id,
        SetState {
            offset,
            registered: [0; 8],
        },
    );
    put(set, ptr::without_provenance_mut(id))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetFree(set: nvmlEventSet_t) -> nvmlReturn_t {
    let Ok(mut sets) = SETS.lock() else {
        return UNKNOWN;
    };
    match sets.remove(&set.addr()) {
        Some(_) => SUCCESS,
        None => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: nvmlDevice_t,
    types: *mut c_ulonglong,
) -> nvmlReturn_t {
    if let Err(rc) = health::reachable(device) {
        return rc;
    }
    match decode(device) {
        Some(Handle::Gpu(_)) => put(types, SUPPORTED),
        // Events are registered on the parent GPU and attributed to instances.
        Some(Handle::Mig(_)) => NOT_SUPPORTED,
        None => INVALID_ARGUMENT,
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(
    device: nvmlDevice_t,
    types: c_ulonglong,
    set: nvmlEventSet_t,
) -> nvmlReturn_t {
    if let Err(rc) = health::reachable(device) {
        return rc;
    }
    let gpu = match decode(device) {
        Some(Handle::Gpu(i)) => i,
        Some(Handle::Mig(_)) => return NOT_SUPPORTED,
        None => return INVALID_ARGUMENT,
    };
    if types & SUPPORTED == 0 {
        return NOT_SUPPORTED;
    }
    let Ok(mut sets) = SETS.lock() else {
        return UNKNOWN;
    };
    match sets
        .get_mut(&set.addr())
        .and_then(|s| s.registered.get_mut(gpu))
    {
        Some(r) => {
            *r |= types & SUPPORTED;
            SUCCESS
        }
        None => INVALID_ARGUMENT,
    }
}

/// The set's next event, consuming the lines up to it; `Ok(None)` when there is none yet.
fn next_event(set: usize) -> Result<Option<nvmlEventData_t>, nvmlReturn_t> {
    let mut sets = SETS.lock().map_err(|_| UNKNOWN)?;
    let state = sets.get_mut(&set).ok_or(INVALID_ARGUMENT)?;
    let Some(path) = events_file() else {
        return Ok(None);
    };
    for (text, end) in lines_from(path, state.offset) {
        state.offset = end;
        let Some(Line::Event {
            gpu,
            kind,
            data,
            gi,
            ci,
        }) = parse(&text)
        else {
            continue;
        };
        if state.registered.get(gpu).is_some_and(|r| r & kind != 0) {
            return Ok(Some(nvmlEventData_t {
                device: handle_of_gpu(gpu),
                eventType: kind,
                eventData: data,
                gpuInstanceId: gi,
                computeInstanceId: ci,
            }));
        }
    }
    // Queued events first; then a lost GPU in the set fails the wait (see `health`).
    if health::any_lost(&state.registered) {
        return Err(GPU_IS_LOST);
    }
    Ok(None)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    timeoutms: c_uint,
) -> nvmlReturn_t {
    if data.is_null() {
        return INVALID_ARGUMENT;
    }
    let deadline = Instant::now().checked_add(Duration::from_millis(timeoutms.into()));
    loop {
        match next_event(set.addr()) {
            Ok(Some(event)) => return put(data, event),
            Ok(None) => {}
            Err(rc) => return rc,
        }
        let left = deadline.map_or(POLL, |d| d.saturating_duration_since(Instant::now()));
        if left.is_zero() {
            return TIMEOUT;
        }
        std::thread::sleep(left.min(POLL));
    }
}
