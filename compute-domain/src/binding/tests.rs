use super::*;
use crate::crd::NodeStatus;

fn claim(node: &str, waits: bool, conditions: serde_json::Value, allocated: &str) -> ResourceClaim {
    let mut result = json!({"request": "channel", "driver": DRIVER, "pool": node,
                            "device": "imex-channel-1"});
    if waits {
        result["bindingConditions"] = json!([READY_CONDITION]);
        result["bindingFailureConditions"] = json!([FAILED_CONDITION]);
    }
    serde_json::from_value(json!({
        "metadata": {"name": "c", "namespace": "t"},
        "spec": {},
        "status": {
            "allocation": {
                "devices": {"results": [result]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
                "allocationTimestamp": allocated,
            },
            "devices": [{"driver": DRIVER, "pool": node, "device": "imex-channel-1",
                         "conditions": conditions}],
        },
    }))
    .unwrap()
}

fn status(nodes: &[(&str, Readiness)]) -> ComputeDomainStatus {
    ComputeDomainStatus {
        nodes: nodes
            .iter()
            .map(|(n, r)| NodeStatus {
                name: n.to_string(),
                ip_address: String::new(),
                clique_id: String::new(),
                status: *r,
                index: None,
            })
            .collect(),
        ..Default::default()
    }
}

const T0: &str = "2026-12-03T10:00:00Z";

fn at(secs: i64) -> Timestamp {
    T0.parse::<Timestamp>().unwrap() + k8s_openapi::jiff::SignedDuration::from_secs(secs)
}

fn cond(t: &str, s: &str, reason: &str) -> serde_json::Value {
    json!({"type": t, "status": s, "reason": reason, "message": "", "lastTransitionTime": T0})
}

const TIMEOUT: Duration = Duration::from_secs(300);

#[test]
fn each_row_of_the_table() {
    let ready = status(&[("n1", Readiness::Ready)]);
    let not_ready = status(&[("n1", Readiness::NotReady)]);
    let none = status(&[]);
    let c = claim("n1", true, json!([]), T0);
    assert!(matches!(
        verdict(&c, &ready, at(1), TIMEOUT),
        Some(Verdict::Ready(_))
    ));
    let Some(Verdict::Waiting(m)) = verdict(&c, &not_ready, at(10), TIMEOUT) else {
        panic!("not waiting")
    };
    assert!(m.contains("node n1 is not Ready"), "{m}");
    let Some(Verdict::Waiting(m)) = verdict(&c, &none, at(10), TIMEOUT) else {
        panic!("not waiting")
    };
    assert!(m.contains("no IMEX daemon on node n1"), "{m}");
    let Some(Verdict::Failed(m)) = verdict(&c, &not_ready, at(300), TIMEOUT) else {
        panic!("not failed")
    };
    assert!(m.contains("places the pod again"), "{m}");
    // Ready wins even past the timeout: the pod can still be bound.
    assert!(matches!(
        verdict(&c, &ready, at(900), TIMEOUT),
        Some(Verdict::Ready(_))
    ));
}

#[test]
fn settled_or_unconditioned_channels_are_left_alone() {
    let not_ready = status(&[("n1", Readiness::NotReady)]);
    // A cluster without the gate: no binding conditions in the result.
    assert_eq!(
        verdict(
            &claim("n1", false, json!([]), T0),
            &not_ready,
            at(900),
            TIMEOUT
        ),
        None
    );
    for settled in [
        json!([cond(READY_CONDITION, "True", "DaemonReady")]),
        json!([cond(FAILED_CONDITION, "True", "NotReadyInTime")]),
    ] {
        let c = claim("n1", true, settled, T0);
        assert_eq!(verdict(&c, &not_ready, at(900), TIMEOUT), None);
    }
    // Not allocated: nothing to say.
    let mut c = claim("n1", true, json!([]), T0);
    c.status = None;
    assert_eq!(verdict(&c, &not_ready, at(1), TIMEOUT), None);
}

#[test]
fn an_unchanged_wait_is_not_written_again() {
    let waiting = claim(
        "n1",
        true,
        json!([cond(READY_CONDITION, "False", "WaitingForDaemon")]),
        T0,
    );
    assert!(!changes(&waiting, &Verdict::Waiting("other words".into())));
    assert!(changes(&waiting, &Verdict::Ready(String::new())));
    assert!(changes(&waiting, &Verdict::Failed(String::new())));
    let fresh = claim("n1", true, json!([]), T0);
    assert!(changes(&fresh, &Verdict::Waiting(String::new())));
}

#[test]
fn a_shared_channels_status_is_its_own_share() {
    let not_ready = status(&[("n1", Readiness::NotReady)]);
    let shared = |status_share: &str| {
        let mut c = claim(
            "n1",
            true,
            json!([cond(READY_CONDITION, "True", "DaemonReady")]),
            T0,
        );
        let s = c.status.as_mut().unwrap();
        s.allocation
            .as_mut()
            .unwrap()
            .devices
            .as_mut()
            .unwrap()
            .results
            .as_mut()
            .unwrap()[0]
            .share_id = Some("1f0c".into());
        s.devices.as_mut().unwrap()[0].share_id = Some(status_share.into());
        c
    };
    // Settled for this share: left alone.
    assert_eq!(verdict(&shared("1f0c"), &not_ready, at(1), TIMEOUT), None);
    // Another share's condition is not this allocation's.
    assert!(matches!(
        verdict(&shared("2a9d"), &not_ready, at(1), TIMEOUT),
        Some(Verdict::Waiting(_))
    ));
    assert_eq!(
        channels(&shared("1f0c"))[0].share_id.as_deref(),
        Some("1f0c")
    );
}
