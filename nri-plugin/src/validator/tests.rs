//! Tests of `validator`: each way a container's adjustment can lack graft's edits, and what
//! passes.

use super::*;
use crate::inject::Plan;
use graft_record::INJECTED_ANNOTATION;

/// A record giving container `app` of pod `p` one char device `/dev/x` (1:3).
fn record() -> ClaimRecord {
    serde_json::from_value(serde_json::json!({"version": 2,
        "claim": {"uid": "c1", "namespace": "ns", "name": "gpu"},
        "devices": [{"name": "d", "edits": {"device_nodes": [
            {"path": "/dev/x", "type": "c", "major": 1, "minor": 3}]}}],
        "pods": [{"uid": "p", "containers": [{"name": "app", "devices": ["d"]}]}]}))
    .unwrap()
}

fn policy() -> InjectionPolicy {
    InjectionPolicy::new(std::path::Path::new("/s"), "/hook", &[]).unwrap()
}

/// The adjustment graft-nri makes for `app`.
fn graft_adjustment() -> nri::ContainerAdjustment {
    let p: Plan = plan(&[record()], "p", "app", &policy()).unwrap().unwrap();
    p.adjustment_with(p.annotation())
}

fn consulted(names: &[&str]) -> Vec<nri::PluginInstance> {
    names
        .iter()
        .map(|n| nri::PluginInstance {
            name: n.to_string(),
            index: "10".into(),
            ..Default::default()
        })
        .collect()
}

#[test]
fn graft_nris_own_adjustment_passes() {
    let v = verdict(
        &[record()],
        "p",
        "app",
        &policy(),
        &graft_adjustment(),
        &consulted(&["graft"]),
    );
    assert_eq!(v, Ok(()));
}

#[test]
fn a_container_the_records_give_nothing_passes_unadjusted() {
    let none = nri::ContainerAdjustment::default();
    let no_claims: [ClaimRecord; 0] = [];
    assert_eq!(
        verdict(&no_claims, "p", "app", &policy(), &none, &[]),
        Ok(())
    );
    // Another container of the same pod, and another pod.
    assert_eq!(
        verdict(&[record()], "p", "sidecar", &policy(), &none, &[]),
        Ok(())
    );
    assert_eq!(
        verdict(&[record()], "q", "app", &policy(), &none, &[]),
        Ok(())
    );
}

#[test]
fn a_container_left_unadjusted_is_refused_with_who_was_asked() {
    let none = nri::ContainerAdjustment::default();
    // graft-nri lost mid-request: listed as consulted, nothing adjusted.
    let e = verdict(
        &[record()],
        "p",
        "app",
        &policy(),
        &none,
        &consulted(&["graft"]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("/dev/x") && e.contains("10-graft"), "{e}");
    // graft-nri not connected at all.
    let e = verdict(&[record()], "p", "app", &policy(), &none, &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("plugins consulted: none"), "{e}");
}

#[test]
fn the_device_alone_or_the_annotation_alone_is_not_enough() {
    let mut only_device = graft_adjustment();
    only_device.annotations.remove(INJECTED_ANNOTATION);
    let e = verdict(&[record()], "p", "app", &policy(), &only_device, &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains(INJECTED_ANNOTATION), "{e}");

    let mut only_annotation = graft_adjustment();
    only_annotation
        .linux
        .mut_or_insert_default()
        .devices
        .clear();
    let e = verdict(&[record()], "p", "app", &policy(), &only_annotation, &[])
        .unwrap_err()
        .to_string();
    assert!(e.contains("/dev/x"), "{e}");

    // Another device number under the same path is not the recorded device.
    let mut other = graft_adjustment();
    other.linux.mut_or_insert_default().devices[0].minor = 4;
    assert!(verdict(&[record()], "p", "app", &policy(), &other, &[]).is_err());
}

#[test]
fn records_graft_nri_would_refuse_are_refused_here_too() {
    // Two claims giving one path different devices: graft-nri refuses the container; were
    // it lost instead, the validator must not let it through.
    let mut second = record();
    second.claim.uid = "c2".into();
    second.claim.name = "other".into();
    second.devices[0].edits.device_nodes[0].minor = 9;
    let e = verdict(
        &[record(), second],
        "p",
        "app",
        &policy(),
        &nri::ContainerAdjustment::default(),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("cannot be applied"), "{e}");
}

fn request(adjust: Option<nri::ContainerAdjustment>) -> nri::ValidateContainerAdjustmentRequest {
    nri::ValidateContainerAdjustmentRequest {
        pod: Some(nri::PodSandbox {
            uid: "p".into(),
            namespace: "ns".into(),
            name: "pod".into(),
            ..Default::default()
        })
        .into(),
        container: Some(nri::Container {
            id: "ctr1".into(),
            name: "app".into(),
            ..Default::default()
        })
        .into(),
        adjust: adjust.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_answers_from_the_store_and_journals_a_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let store = RecordStore::open(dir.path()).unwrap();
    store.put_claim(&record()).unwrap();
    let v = Validator::new(store, policy(), Duration::from_secs(1));

    let ok = v
        .validate_container_adjustment(request(Some(graft_adjustment())))
        .await
        .unwrap();
    assert!(!ok.reject, "{}", ok.reason);

    let refused = v
        .validate_container_adjustment(request(None))
        .await
        .unwrap();
    assert!(refused.reject);
    assert!(
        refused.reason.contains("container \"app\" of pod ns/pod")
            && refused.reason.contains("with claim ns/gpu"),
        "{}",
        refused.reason
    );
    assert_eq!((v.allowed.get(), v.refused.get()), (1, 1));
    // The refusal reaches the journal graft-driver turns into an Event on the pod.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let entries = graft_record::refusals::read_all(dir.path()).unwrap();
        if !entries.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no journal entry");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_unreadable_store_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let store = RecordStore::open(dir.path()).unwrap();
    store.put_claim(&record()).unwrap();
    // The pod's index entry made unreadable as a record: a directory where a file belongs.
    let entry = dir.path().join("pods/p/c1");
    std::fs::remove_file(&entry).unwrap();
    std::fs::create_dir(&entry).unwrap();
    let v = Validator::new(store, policy(), Duration::from_secs(1));
    let r = v
        .validate_container_adjustment(request(None))
        .await
        .unwrap();
    assert!(r.reject, "an unreadable pod must not pass");
}

#[test]
fn standing_follows_the_connection_and_unsupported_sticks() {
    let dir = tempfile::tempdir().unwrap();
    let v = Validator::new(
        RecordStore::open(dir.path()).unwrap(),
        policy(),
        Duration::from_secs(1),
    );
    assert!(matches!(v.standing(), Standing::Waiting(_)));
    let info = graft_nri_sdk::RuntimeInfo {
        name: "containerd".into(),
        version: "v1.7.24".into(),
        ..Default::default()
    };
    v.connection_state(ConnectionState::Unsupported(info.clone()));
    v.connection_state(ConnectionState::Disconnected("dropped".into()));
    assert!(matches!(v.standing(), Standing::Unsupported(s) if s.contains("v1.7.24")));
    v.connection_state(ConnectionState::Configured(graft_nri_sdk::RuntimeInfo {
        version: "v2.4.2".into(),
        ..info
    }));
    assert!(matches!(v.standing(), Standing::Serving(_)));
    v.connection_state(ConnectionState::Disconnected("runtime restarted".into()));
    assert!(matches!(v.standing(), Standing::Waiting(s) if s == "runtime restarted"));
}
