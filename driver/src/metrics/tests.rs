use super::*;
use crate::health::{Condition, DeviceHealth};
use crate::model::Kind;

fn text(m: &DriverMetrics) -> String {
    let mut r = Registry::default();
    m.register(&mut r);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
    out
}

fn unhealthy(reason: &str) -> DeviceHealth {
    DeviceHealth {
        condition: Condition::Unhealthy,
        reason: reason.into(),
        message: String::new(),
        since: std::time::SystemTime::UNIX_EPOCH,
    }
}

#[test]
fn health_events_have_bounded_labels() {
    assert_eq!(event_labels("xid-79").xid, "79");
    assert_eq!(event_labels("xid-79999").xid, "other");
    assert_eq!(event_labels("xid-7a").xid, "other");
    assert_eq!(event_labels("anything at all").kind, "other");
    let m = DriverMetrics::default();
    let mut now = HealthReport::default();
    now.devices.insert("gpu-0".into(), unhealthy("xid-79"));
    m.count_health_events(&HealthReport::default(), &now);
    m.count_health_events(&now, &now);
    m.count_health_events(&now, &HealthReport::default());
    let t = text(&m);
    assert!(
        t.contains("graft_driver_health_events_total{kind=\"xid\",xid=\"79\"} 1"),
        "{t}"
    );
    assert!(
        t.contains("graft_driver_health_events_total{kind=\"recovered\",xid=\"\"} 1"),
        "{t}"
    );
}

#[test]
fn discovery_backends() {
    let m = DriverMetrics::default();
    let since = SystemTime::UNIX_EPOCH;
    let failing = vec![("nvidia", since, "NVML not found".to_string())];
    m.discovery_scanned(
        &[("char", true), ("nvidia", false)],
        &["nvidia"],
        failing.clone(),
    );
    m.discovery_scanned(
        &[("char", true), ("nvidia", false)],
        &["nvidia"],
        failing.clone(),
    );
    let t = text(&m);
    for want in [
        "graft_driver_discovery_backend_up{backend=\"char\"} 1",
        "graft_driver_discovery_backend_up{backend=\"nvidia\"} 0",
        "graft_driver_discovery_failures_total{backend=\"nvidia\"} 2",
        "graft_driver_discovery_failures_total{backend=\"char\"} 0",
    ] {
        assert!(t.contains(want), "{want} missing from\n{t}");
    }
    assert_eq!(m.failing_backends(), failing);
    m.discovery_scanned(&[("char", true), ("nvidia", true)], &[], vec![]);
    assert!(text(&m).contains("graft_driver_discovery_backend_up{backend=\"nvidia\"} 1"));
    assert!(m.failing_backends().is_empty());
}

#[test]
fn calls_and_publishing_are_counted() {
    let m = DriverMetrics::default();
    m.prepared(true, Duration::from_millis(5));
    m.unprepared(false, Duration::from_millis(5));
    assert!(!m.published());
    m.reconciled(Err(()));
    m.reconciled(Ok(true));
    assert!(m.published());
    let t = text(&m);
    for want in [
        "graft_driver_prepare_duration_seconds_count{result=\"ok\"} 1",
        "graft_driver_prepare_duration_seconds_count{result=\"error\"} 0",
        "graft_driver_unprepare_duration_seconds_count{result=\"error\"} 1",
        "graft_driver_slices_published_total 1",
        "graft_driver_slice_publish_errors_total 1",
        "graft_driver_devices{class=\"gpu\",health=\"unhealthy\"} 0",
        "graft_driver_prepared_claims 0",
        "graft_driver_records 0",
        "graft_driver_nri_plugin_connected 0",
    ] {
        assert!(t.contains(want), "{want} missing from\n{t}");
    }
}

#[test]
fn devices_are_counted_by_health_degraded_apart() {
    let m = DriverMetrics::default();
    let devices = [
        Device::new("gpu-0", Kind::Gpu),
        Device::new("gpu-1", Kind::Gpu),
        Device::new("gpu-2", Kind::Gpu),
    ];
    let mut report = HealthReport::default();
    report.devices.insert("gpu-1".into(), unhealthy("xid-79"));
    let mut degraded = unhealthy("xid-13");
    degraded.condition = Condition::Degraded;
    report.devices.insert("gpu-2".into(), degraded);
    m.set_devices(&devices, &report);
    let t = text(&m);
    for health in ["healthy", "degraded", "unhealthy"] {
        let want = format!("graft_driver_devices{{class=\"gpu\",health=\"{health}\"}} 1");
        assert!(t.contains(&want), "{want} missing from\n{t}");
    }
}
