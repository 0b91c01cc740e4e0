use graft_record::containers::{AppliedEdits, PodRef, RecordRef, CONTAINER_ENTRY_VERSION};
use graft_record::{ClaimRef, ContainerRecord, DeviceRecord, PodRecord};

use super::*;
use crate::usage::ProcessUsage;

fn record(claim: &str, device: &str, pod: &str, containers: &[&str]) -> ClaimRecord {
    ClaimRecord {
        version: 2,
        claim: ClaimRef {
            uid: format!("{claim}-uid"),
            namespace: "ns".into(),
            name: claim.into(),
        },
        devices: vec![DeviceRecord {
            name: device.into(),
            pool: "node".into(),
            requests: vec!["gpu".into()],
            edits: Default::default(),
        }],
        env: Vec::new(),
        pods: vec![PodRecord {
            uid: format!("{pod}-uid"),
            namespace: "ns".into(),
            name: pod.into(),
            containers: containers
                .iter()
                .map(|c| ContainerRecord {
                    name: c.to_string(),
                    devices: vec![device.into()],
                })
                .collect(),
        }],
    }
}

fn busy(device: &str) -> DeviceUsage {
    DeviceUsage {
        device: device.into(),
        gpu_uuid: "GPU-1".into(),
        gpu_instance: String::new(),
        utilization: Some(0.75),
        memory_used_bytes: Some(1 << 30),
        power_watts: Some(300.0),
        per_process: false,
        processes: Vec::new(),
    }
}

fn entry(id: &str, pod: &str, container: &str, claim: &str, device: &str) -> ContainerEntry {
    ContainerEntry {
        version: CONTAINER_ENTRY_VERSION,
        id: id.into(),
        pod: PodRef {
            uid: format!("{pod}-uid"),
            namespace: "ns".into(),
            name: pod.into(),
        },
        container: container.into(),
        injected_ms: 0,
        records: vec![RecordRef {
            claim_uid: format!("{claim}-uid"),
            namespace: "ns".into(),
            name: claim.into(),
            record: String::new(),
            requests: vec!["gpu".into()],
            devices: vec![device.into()],
        }],
        edits: AppliedEdits::default(),
    }
}

#[test]
fn a_device_is_reported_for_each_container_that_received_it() {
    let report = UsageReport {
        devices: vec![busy("gpu-2"), busy("gpu-3")],
    };
    let records = [record("train", "gpu-2", "trainer", &["main", "sidecar"])];
    let got = attribute(&report, &records, |_| None);
    let who: Vec<(&str, &str, &str, &str)> = got
        .iter()
        .map(|a| {
            (
                a.labels.pod.as_str(),
                a.labels.container.as_str(),
                a.labels.claim.as_str(),
                a.labels.device.as_str(),
            )
        })
        .collect();
    // gpu-3 is held by no claim: not reported.
    assert_eq!(
        who,
        [
            ("trainer", "main", "train", "gpu-2"),
            ("trainer", "sidecar", "train", "gpu-2")
        ]
    );
    assert_eq!(got[0].utilization, Some(0.75));
    assert_eq!(got[0].labels.gpu.UUID, "GPU-1");
}

#[test]
fn an_mps_client_is_reported_for_its_own_container_only() {
    let mut gpu = busy("gpu-4");
    gpu.per_process = true;
    gpu.processes = vec![
        ProcessUsage {
            container_id: "aaa".into(),
            memory_used_bytes: 100,
        },
        ProcessUsage {
            container_id: "aaa".into(),
            memory_used_bytes: 20,
        },
        ProcessUsage {
            container_id: "bbb".into(),
            memory_used_bytes: 7,
        },
        // A process of a container graft did not give this GPU: not anyone's.
        ProcessUsage {
            container_id: "ccc".into(),
            memory_used_bytes: 9,
        },
    ];
    let report = UsageReport { devices: vec![gpu] };
    let got = attribute(&report, &[], |id| match id {
        "aaa" => Some(entry("aaa", "a", "app", "share-a", "gpu-4")),
        "bbb" => Some(entry("bbb", "b", "app", "share-b", "gpu-4")),
        "ccc" => Some(entry("ccc", "c", "app", "other", "gpu-5")),
        _ => None,
    });
    let who: Vec<(&str, Option<u64>, Option<f64>)> = got
        .iter()
        .map(|a| (a.labels.pod.as_str(), a.memory_used_bytes, a.utilization))
        .collect();
    assert_eq!(who, [("a", Some(120), None), ("b", Some(7), None)]);
}

#[test]
fn the_gauges_hold_only_the_last_round() {
    let m = UsageMetrics::default();
    let records = [record("train", "gpu-2", "trainer", &["main"])];
    let one = attribute(
        &UsageReport {
            devices: vec![busy("gpu-2")],
        },
        &records,
        |_| None,
    );
    m.set(&one);
    m.set(&one);
    let mut r = Registry::default();
    m.register(&mut r);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
    assert!(
        text.contains("graft_gpu_memory_used_bytes{namespace=\"ns\",pod=\"trainer\",container=\"main\",claim=\"train\",device=\"gpu-2\",UUID=\"GPU-1\",GPU_I_ID=\"\"} 1073741824"),
        "{text}"
    );
    m.set(&[]);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
    assert!(!text.contains("pod=\"trainer\""), "{text}");
}
