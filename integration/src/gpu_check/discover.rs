//! graft-driver's nvidia discovery, configured as graft-driver's main.rs configures it for
//! a node (host root `/`), timed, and the device the check gives to a container.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use graft_driver::discovery::nvidia::devices::HookConfig;
use graft_driver::discovery::nvidia::driver_files::Roots;
use graft_driver::discovery::nvidia::{NvidiaConfig, NvidiaDiscovery};
use graft_driver::discovery::Discovery;
use graft_driver::model::{Attribute, Device};

use super::Options;

/// What a scan found, or why it failed.
pub struct Scan {
    /// The devices discovered.
    pub devices: Vec<Device>,
    /// How long discovery took.
    pub elapsed: Duration,
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// The ldconfig graft-hook runs: the driver root's, else the host's (Ubuntu's
/// `/sbin/ldconfig` is a shell wrapper around `ldconfig.real`), as graft-driver picks it.
fn ldconfig(driver_root: &Path) -> String {
    let d = driver_root.to_string_lossy();
    let d = d.trim_end_matches('/');
    [
        format!("{d}/sbin/ldconfig.real"),
        format!("{d}/sbin/ldconfig"),
        "/sbin/ldconfig.real".into(),
        "/sbin/ldconfig".into(),
    ]
    .into_iter()
    .find(|p| Path::new(p).is_file())
    .unwrap_or_else(|| "/sbin/ldconfig".into())
}

/// The NVIDIA discovery config for `opts`'s roots, the driver's files prepared in one
/// directory below the check's state directory, as graft-driver prepares them.
pub fn config(opts: &Options) -> NvidiaConfig {
    config_with(opts, true)
}

/// The same, with the driver's files prepared in one directory or each mounted on its own.
pub fn config_with(opts: &Options, prepared: bool) -> NvidiaConfig {
    NvidiaConfig {
        roots: Roots {
            host: PathBuf::from("/"),
            driver: opts.driver_root.clone(),
        },
        nvml_lib: None,
        proc_root: opts.proc_root.clone(),
        sys_root: opts.sys_root.clone(),
        dev_root: opts.dev_root.clone(),
        hook: HookConfig {
            path: opts.hook.to_string_lossy().into_owned(),
            ldconfig: ldconfig(&opts.driver_root),
            params_copy: opts
                .work_dir
                .join("graft-state/nvidia/params")
                .to_string_lossy()
                .into_owned(),
        },
        driver_copies: prepared
            .then(|| graft_record::driver_dir::base(&opts.work_dir.join("graft-state"))),
        imex_channels: 0,
        compute_domains: false,
        passthrough: false,
        dynamic_mig: Default::default(),
        mps: Default::default(),
        time_slicing: Default::default(),
        time_slicing_replicas: 4,
        placement_order: Default::default(),
    }
}

/// Loads NVML and scans once; the time covers the whole scan, NVML load included.
pub fn scan(opts: &Options) -> Scan {
    scan_with(opts, true)
}

/// As [`scan`], prepared or not (`config_with`).
pub fn scan_with(opts: &Options, prepared: bool) -> Scan {
    let started = Instant::now();
    let result = NvidiaDiscovery::new(config_with(opts, prepared)).and_then(|d| d.discover());
    let elapsed = started.elapsed();
    match result {
        Ok(devices) => Scan {
            devices,
            elapsed,
            error: None,
        },
        Err(e) => Scan {
            devices: Vec::new(),
            elapsed,
            error: Some(e.to_string()),
        },
    }
}

/// A string-ish attribute's value ("" when absent).
pub fn attr(d: &Device, key: &str) -> String {
    match d.attributes.get(key) {
        Some(Attribute::String(s)) | Some(Attribute::Version(s)) => s.clone(),
        Some(Attribute::Int(i)) => i.to_string(),
        Some(Attribute::Bool(b)) => b.to_string(),
        None => String::new(),
    }
}

fn index(d: &Device) -> i64 {
    match d
        .attributes
        .get("index")
        .or(d.attributes.get("parentIndex"))
    {
        Some(Attribute::Int(i)) => *i,
        _ => i64::MAX,
    }
}

/// The first full GPU by NVML index; a MIG device when every GPU is in MIG mode.
pub fn pick(devices: &[Device]) -> Option<&Device> {
    let of = |kind: &str| {
        devices
            .iter()
            .filter(|d| attr(d, "type") == kind)
            .min_by_key(|d| (index(d), d.name.clone()))
    };
    of("gpu").or_else(|| of("mig"))
}
