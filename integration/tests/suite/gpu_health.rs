//! graft-driver's GPU health monitor on the fake node: devices from the nvidia backend's
//! real discovery, NVML events and GPU state fed through the fake library's event file
//! (lost GPUs, recovery actions, row remapping), and the health report the taints, the
//! kubelet's stream and the Events are made from. No GPU, no root.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use graft_driver::discovery::nvidia::health::classify::default_informational;
use graft_driver::discovery::nvidia::health::monitor::{self, MonitorConfig};
use graft_driver::discovery::nvidia::nvml::GpuSelection;
use graft_driver::discovery::nvidia::NvidiaDiscovery;
use graft_driver::discovery::Discovery;
use graft_driver::health::{Condition, HealthReport};
use graft_driver::metrics::{self, DriverMetrics};
use graft_driver::model::Device;
use graft_integration::fake_gpu::{FakeNode, LIB_DIR};
use graft_integration::scrape;
use nvml_wrapper::Nvml;
use nvml_wrapper_sys::bindings::*;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::common;

/// Waits for the report to satisfy `ok`; how long it took.
fn wait_for(
    rx: &watch::Receiver<HealthReport>,
    what: &str,
    ok: impl Fn(&HealthReport) -> bool,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if ok(&rx.borrow()) {
            return Ok(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("{what}: not within 10 s; report: {:?}", rx.borrow())
}

/// Waits until the metrics show `series` at `want` (counters: at least).
fn wait_metric(m: &DriverMetrics, series: &str, want: f64) -> anyhow::Result<()> {
    let counter = series.contains("_total");
    let mut registry = Registry::default();
    m.register(&mut registry);
    let start = Instant::now();
    loop {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry)?;
        let v = scrape::value(&text, series);
        if v == Some(want) || (counter && v.is_some_and(|v| v >= want)) {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(10) {
            bail!("{series} is not {want}:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn condition(r: &HealthReport, device: &str) -> Option<(Condition, String)> {
    r.get(device).map(|h| (h.condition, h.reason.clone()))
}

fn unhealthy(reason: &str) -> Option<(Condition, String)> {
    Some((Condition::Unhealthy, reason.into()))
}

fn nvidia(node: &FakeNode) -> anyhow::Result<NvidiaDiscovery> {
    common::discovery(
        node,
        common::as_host_root(node),
        2,
        "/var/lib/graft/bin/graft-hook",
    )
}

/// A monitor on `devices`, keeping its conditions in `state` as of boot `boot`.
fn start(
    d: &NvidiaDiscovery,
    inventory: watch::Receiver<Vec<Device>>,
    state: &Path,
    boot: &str,
) -> anyhow::Result<(watch::Receiver<HealthReport>, std::thread::JoinHandle<()>)> {
    let (tx, rx) = watch::channel(HealthReport::default());
    let thread = monitor::spawn(
        MonitorConfig {
            nvml_lib: d.nvml_path()?,
            informational_xids: default_informational(),
            quiet: Some(Duration::from_secs(2)),
            probe_every: Duration::from_millis(500),
            state_dir: state.to_path_buf(),
            boot_id: boot.into(),
        },
        inventory,
        tx,
    )?;
    Ok((rx, thread))
}

/// Events written before the monitor registered are not delivered (as with the real
/// library): an informational XID on NVML index 1 (gpu-3), repeated until it shows,
/// proves registration.
fn registered(node: &FakeNode, rx: &watch::Receiver<HealthReport>) -> anyhow::Result<()> {
    let start = Instant::now();
    while condition(&rx.borrow(), "gpu-3").is_none() {
        ensure!(
            start.elapsed() < Duration::from_secs(10),
            "never registered"
        );
        node.inject("1 xid 13")?;
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

#[test]
fn events_taint_devices_and_only_a_fine_gpu_clears() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let node = FakeNode::create(&dir.path().join("node"))?;
    let d = nvidia(&node)?;
    let devices = d.discover()?;
    let (inv_tx, inv_rx) = watch::channel(devices.clone());
    // The driver's metrics follow the same channels.
    let m = std::sync::Arc::new(DriverMetrics::default());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let (rx, _thread) = start(&d, inv_rx.clone(), &dir.path().join("state"), "boot-1")?;
    // With the family's health reasons, as graft-driver passes what its backends declare.
    let reasons = graft_driver::discovery::nvidia::health::classify::REASONS.to_vec();
    rt.spawn(metrics::watch_devices(
        m.clone(),
        inv_rx,
        rx.clone(),
        reasons,
    ));
    registered(&node, &rx)?;
    assert_eq!(
        condition(&rx.borrow(), "gpu-3"),
        Some((Condition::Degraded, "xid-13".into()))
    );

    // NVML index 0 is minor 2; the driver asks for a reset. The figure goes to
    // docs/benchmarks.md; 2 s is the promise.
    node.inject("0 xid 79")?;
    node.inject("0 recovery 1")?;
    let took = wait_for(&rx, "XID 79 on gpu-2", |r| {
        condition(r, "gpu-2") == unhealthy("xid-79")
    })?;
    println!("XID 79 to unhealthy in the health report: {took:?}");
    ensure!(took < Duration::from_secs(2), "{took:?}");
    // Its passthrough function is the same GPU.
    assert!(rx.borrow().is_unhealthy("vfio-0000-18-00-0"));
    // Counted per device: the GPU and its passthrough function.
    wait_metric(
        &m,
        r#"graft_driver_health_events_total{kind="xid",xid="79"}"#,
        2.0,
    )?;
    wait_metric(
        &m,
        r#"graft_driver_devices{class="gpu.graft.dev",health="unhealthy"}"#,
        1.0,
    )?;
    wait_metric(
        &m,
        r#"graft_driver_devices{class="vfio.graft.dev",health="unhealthy"}"#,
        1.0,
    )?;

    // Attributed to GPU instance 1 of index 6 (minor 4): that instance's device only. The
    // driver asks for nothing (its recovery action reads none), so a probe clears it once
    // the driver had a probe interval to say otherwise.
    node.inject("6 xid 48 gi 1 ci 0")?;
    wait_for(&rx, "XID 48 on gpu-4-mig-1-0", |r| {
        r.is_unhealthy("gpu-4-mig-1-0")
    })?;
    assert!(!rx.borrow().is_unhealthy("gpu-4-mig-2-0"));
    let took = wait_for(&rx, "gpu-4-mig-1-0 fine", |r| {
        r.get("gpu-4-mig-1-0").is_none()
    })?;
    ensure!(took >= Duration::from_millis(300), "no settling: {took:?}");

    // A lost GPU replaces the milder condition and outlasts the quiet time.
    node.inject("1 lost")?;
    wait_for(&rx, "gpu-3 lost", |r| {
        condition(r, "gpu-3") == unhealthy("gpu-lost")
    })?;
    std::thread::sleep(Duration::from_secs(3));
    assert!(rx.borrow().is_unhealthy("gpu-3"));
    // The fatal XID does not clear on time either: the action still says reset.
    assert_eq!(condition(&rx.borrow(), "gpu-2"), unhealthy("xid-79"));

    // Recovery action "none" (after the reset): cleared at once.
    node.inject("0 recovery 0")?;
    let took = wait_for(&rx, "gpu-2 recovered", |r| r.get("gpu-2").is_none())?;
    println!("recovery action none to cleared: {took:?}");
    assert!(rx.borrow().is_unhealthy("gpu-3"));

    // Back on the bus: the next probe finds it fine.
    node.inject("1 found")?;
    let took = wait_for(&rx, "gpu-3 recovered", |r| r.get("gpu-3").is_none())?;
    ensure!(took < Duration::from_secs(2), "{took:?}");
    // Its events are watched again.
    node.inject("1 ecc-double-bit")?;
    wait_for(&rx, "gpu-3 watched again", |r| {
        condition(r, "gpu-3") == unhealthy("ecc-double-bit")
    })?;

    // A GPU asking for a reset; no longer published it leaves the report, and is back
    // with its condition when published again.
    node.inject("4 recovery 1")?;
    wait_for(&rx, "gpu-6 reset required", |r| {
        condition(r, "gpu-6") == unhealthy("reset-required")
    })?;
    inv_tx.send_replace(
        devices
            .iter()
            .filter(|d| d.name != "gpu-6")
            .cloned()
            .collect(),
    );
    wait_for(&rx, "gpu-6 not reported", |r| r.get("gpu-6").is_none())?;
    inv_tx.send_replace(devices.clone());
    wait_for(&rx, "gpu-6 back, still to be reset", |r| {
        condition(r, "gpu-6") == unhealthy("reset-required")
    })?;
    node.inject("4 recovery 0")?;
    wait_for(&rx, "gpu-6 reset", |r| r.get("gpu-6").is_none())?;
    wait_metric(
        &m,
        r#"graft_driver_health_events_total{kind="gpu-lost",xid=""}"#,
        1.0,
    )?;
    wait_metric(
        &m,
        r#"graft_driver_health_events_total{kind="reset-required",xid=""}"#,
        1.0,
    )?;
    node.inject("1 recovery 0")?;
    wait_metric(
        &m,
        r#"graft_driver_devices{class="gpu.graft.dev",health="unhealthy"}"#,
        0.0,
    )?;
    Ok(())
}

#[test]
fn health_is_read_at_start_and_survives_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let node = FakeNode::create(&dir.path().join("node"))?;
    let state = dir.path().join("state");
    // Before graft starts: index 2 (minor 0) wants a reboot, index 3 (minor 1) has a row
    // remapping pending.
    node.inject("2 recovery 2")?;
    node.inject("3 remap-pending")?;
    let d = nvidia(&node)?;
    let (_inv_tx, inv_rx) = watch::channel(d.discover()?);
    let (rx, thread) = start(&d, inv_rx.clone(), &state, "boot-1")?;
    wait_for(&rx, "read at start", |r| {
        condition(r, "gpu-0") == unhealthy("reboot-required")
            && condition(r, "gpu-1") == unhealthy("row-remap-pending")
    })?;
    registered(&node, &rx)?;
    node.inject("0 xid 79")?;
    node.inject("0 recovery 1")?;
    wait_for(&rx, "XID 79", |r| {
        condition(r, "gpu-2") == unhealthy("xid-79")
    })?;
    ensure!(state.join("health/conditions.json").is_file());

    // graft-driver restarts: the conditions hold from the start, before any probe.
    drop(rx);
    thread.join().ok().context("the monitor panicked")?;
    let (rx, _thread) = start(&d, inv_rx, &state, "boot-1")?;
    // Already in the report when the monitor is started, before its first probe.
    let r = rx.borrow().clone();
    assert_eq!(condition(&r, "gpu-2"), unhealthy("xid-79"), "{r:?}");
    assert_eq!(condition(&r, "gpu-0"), unhealthy("reboot-required"));
    // Informational ones are kept as well, until their quiet time passes.
    assert_eq!(
        condition(&r, "gpu-3").map(|c| c.0),
        Some(Condition::Degraded)
    );
    // The first probe keeps what NVML still says.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(condition(&rx.borrow(), "gpu-2"), unhealthy("xid-79"));

    node.inject("3 remap-clear")?;
    wait_for(&rx, "remapped", |r| r.get("gpu-1").is_none())?;
    node.inject("2 recovery 0")?;
    node.inject("0 recovery 0")?;
    wait_for(&rx, "all fine", |r| {
        r.get("gpu-0").is_none() && r.get("gpu-2").is_none()
    })?;
    Ok(())
}

/// One GPU off the bus never takes the others: left out when no scan published it,
/// kept (for the monitor to taint) when one did, back when NVML reads it again.
#[test]
fn a_lost_gpu_leaves_the_other_devices_published() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let node = FakeNode::create(dir.path())?;
    node.inject("1 lost")?;
    let d = nvidia(&node)?;
    let names = |devs: &[Device]| -> Vec<String> {
        let mut n: Vec<String> = devs
            .iter()
            .filter(|d| d.name.starts_with("gpu-"))
            .map(|d| d.name.clone())
            .collect();
        n.sort();
        n
    };
    let devs = d.discover()?;
    let gpus = names(&devs);
    ensure!(!gpus.contains(&"gpu-3".to_string()), "{gpus:?}");
    ensure!(gpus.len() == 10, "{gpus:?}");
    let u = d.unavailable();
    ensure!(u.len() == 1, "{u:?}");
    assert_eq!(u[0].reason, "GpuUnavailable");
    ensure!(
        u[0].message.contains("NVML index 1")
            && u[0].message.contains("(NVML_ERROR_GPU_IS_LOST)")
            && u[0].message.contains("left out"),
        "{}",
        u[0].message
    );

    node.inject("1 found")?;
    let all = names(&d.discover()?);
    ensure!(all.len() == 11, "{all:?}");
    assert!(d.unavailable().is_empty());

    // Published, then lost: kept as last read; a MIG GPU keeps its MIG devices.
    node.inject("0 lost")?;
    node.inject("6 lost")?;
    let kept = d.discover()?;
    assert_eq!(names(&kept), all);
    let u = d.unavailable();
    ensure!(u.len() == 2, "{u:?}");
    ensure!(u[0].message.contains("stay published"), "{}", u[0].message);
    Ok(())
}

/// An XID NVML attributes to a GPU instance of a dynamic-MIG GPU lands on the placement
/// device that holds the instance, found through NVML (placements carry no instance id).
#[test]
fn an_instance_event_lands_on_its_dynamic_placement() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let node = FakeNode::create(&dir.path().join("node"))?;
    node.configure_mig(&format!(
        "mig 5 on\nstate {}\n",
        dir.path().join("mig-state").display()
    ))?;
    let mut config = common::discovery_config(&node, common::as_host_root(&node), 0, "/bin/true");
    config.dynamic_mig = GpuSelection::parse("5").map_err(anyhow::Error::msg)?;
    let d = NvidiaDiscovery::new(config)?;
    let devices = d.discover()?;
    ensure!(devices.iter().any(|d| d.name == "gpu-7-mig-3g-40gb-4"));

    // A 3g instance at slice 4, as prepare would make it.
    let lib = node.host.join(&LIB_DIR[1..]).join("libnvidia-ml.so.1");
    let nvml = Nvml::builder().lib_path(lib.as_os_str()).init()?;
    let gpu = nvml.device_by_index(5)?;
    let mut gi: nvmlGpuInstance_t = std::ptr::null_mut();
    let at = nvmlGpuInstancePlacement_t { start: 4, size: 4 };
    // SAFETY: live handle; the placement and out pointer are live locals.
    let rc = unsafe {
        nvml.lib().nvmlDeviceCreateGpuInstanceWithPlacement(
            gpu.handle(),
            NVML_GPU_INSTANCE_PROFILE_3_SLICE,
            &at,
            &mut gi,
        )
    };
    ensure!(rc == nvmlReturn_enum_NVML_SUCCESS, "create: {rc}");
    // SAFETY: an all-zero info is valid; the instance handle is live.
    let mut info: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
    let rc = unsafe { nvml.lib().nvmlGpuInstanceGetInfo(gi, &mut info) };
    ensure!(rc == nvmlReturn_enum_NVML_SUCCESS, "info: {rc}");

    let (_inv_tx, inv_rx) = watch::channel(devices);
    let (rx, _thread) = start(&d, inv_rx, &dir.path().join("state"), "boot-1")?;
    registered(&node, &rx)?;
    node.inject(&format!("5 xid 48 gi {} ci 0", info.id))?;
    node.inject("5 recovery 1")?;
    wait_for(
        &rx,
        "the placement holding the instance, then the GPU",
        |r| r.is_unhealthy("gpu-7-mig-3g-40gb-4") && r.is_unhealthy("gpu-7-mig-3g-40gb-0"),
    )?;
    // The recovery action is the whole GPU's: it lands on every device of it.
    let r = rx.borrow().clone();
    assert_eq!(
        condition(&r, "gpu-7-mig-3g-40gb-4"),
        unhealthy("xid-48"),
        "{r:?}"
    );
    assert_eq!(
        condition(&r, "gpu-7-mig-3g-40gb-0"),
        unhealthy("reset-required")
    );
    Ok(())
}
