//! graft-driver's GPU health monitor on the fake node: devices from the nvidia backend's
//! real discovery, NVML events fed through the fake library's event file, and the health
//! report the taints, the kubelet's stream and the Events are made from. No GPU, no root.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure};
use graft_driver::discovery::Discovery;
use graft_driver::health::classify::default_informational;
use graft_driver::health::monitor::{self, MonitorConfig};
use graft_driver::health::{Condition, HealthReport};
use graft_driver::metrics::{self, DriverMetrics};
use graft_integration::fake_gpu::FakeNode;
use graft_integration::scrape;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

mod common;

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

#[test]
fn events_taint_devices_and_recovery_clears_them() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let node = FakeNode::create(dir.path())?;
    let d = common::discovery(
        &node,
        common::as_host_root(&node),
        2,
        "/var/lib/graft/bin/graft-hook",
    )?;
    let devices = d.discover()?;
    let (inv_tx, inv_rx) = watch::channel(devices.clone());
    let (tx, rx) = watch::channel(HealthReport::default());
    // The driver's metrics follow the same channels.
    let m = std::sync::Arc::new(DriverMetrics::default());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.spawn(metrics::watch_devices(
        m.clone(),
        inv_rx.clone(),
        rx.clone(),
    ));
    monitor::spawn(
        MonitorConfig {
            nvml_lib: d.nvml_path()?,
            informational_xids: default_informational(),
            quiet: Some(Duration::from_secs(2)),
            probe_every: Duration::from_millis(500),
        },
        inv_rx,
        tx,
    )?;

    // Events written before the monitor registered are not delivered (as with the real
    // library): an informational XID, repeated until it shows, proves registration.
    let start = Instant::now();
    while condition(&rx.borrow(), "gpu-3").is_none() {
        ensure!(
            start.elapsed() < Duration::from_secs(10),
            "never registered"
        );
        node.inject("1 xid 13")?;
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        condition(&rx.borrow(), "gpu-3"),
        Some((Condition::Degraded, "xid-13".into()))
    );

    // NVML index 0 is minor 2. The figure goes to docs/benchmarks.md; 2 s is the promise.
    node.inject("0 xid 79")?;
    let took = wait_for(&rx, "XID 79 on gpu-2", |r| {
        condition(r, "gpu-2") == Some((Condition::Unhealthy, "xid-79".into()))
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
        r#"graft_driver_devices{class="gpu",health="unhealthy"}"#,
        1.0,
    )?;
    wait_metric(
        &m,
        r#"graft_driver_devices{class="vfio",health="unhealthy"}"#,
        1.0,
    )?;

    // Attributed to GPU instance 1 of index 6 (minor 4): that instance's device only.
    node.inject("6 xid 48 gi 1 ci 0")?;
    wait_for(&rx, "XID 48 on gpu-4-mig-1-0", |r| {
        r.is_unhealthy("gpu-4-mig-1-0")
    })?;
    assert!(!rx.borrow().is_unhealthy("gpu-4-mig-2-0"));

    // A lost GPU replaces the milder condition and outlasts the quiet time.
    node.inject("1 lost")?;
    wait_for(&rx, "gpu-3 lost", |r| {
        condition(r, "gpu-3") == Some((Condition::Unhealthy, "gpu-lost".into()))
    })?;
    std::thread::sleep(Duration::from_secs(3));
    assert!(rx.borrow().is_unhealthy("gpu-3"));

    // Recovery action "none" clears at once; the MIG device after its quiet time.
    node.inject("0 recovery 0")?;
    wait_for(&rx, "gpu-2 recovered", |r| r.get("gpu-2").is_none())?;
    wait_for(&rx, "gpu-4-mig-1-0 quiet", |r| {
        r.get("gpu-4-mig-1-0").is_none()
    })?;
    assert!(rx.borrow().is_unhealthy("gpu-3"));

    // Back on the bus: the probe sees it, then the quiet time passes.
    node.inject("1 found")?;
    let took = wait_for(&rx, "gpu-3 recovered", |r| r.get("gpu-3").is_none())?;
    ensure!(
        took >= Duration::from_millis(1500),
        "no quiet time: {took:?}"
    );

    // A reset GPU asks for action; a device no longer published is forgotten.
    node.inject("4 recovery 1")?;
    wait_for(&rx, "gpu-6 reset required", |r| {
        condition(r, "gpu-6") == Some((Condition::Unhealthy, "reset-required".into()))
    })?;
    inv_tx.send_replace(
        devices
            .iter()
            .filter(|d| d.name != "gpu-6")
            .cloned()
            .collect(),
    );
    wait_for(&rx, "gpu-6 forgotten", |r| r.get("gpu-6").is_none())?;
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
    wait_metric(
        &m,
        r#"graft_driver_devices{class="gpu",health="unhealthy"}"#,
        0.0,
    )?;
    Ok(())
}
