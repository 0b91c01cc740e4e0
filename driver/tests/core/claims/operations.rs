//! Every transition of the claim life cycle, taken through the core's operations, and the
//! refusals that keep a device with one claim.

use super::*;
use graft_driver::claims::lifecycle::Stage;

#[test]
fn prepare_then_unprepare_walks_absent_started_completed_absent() {
    let node = Node::new();
    let core = node.start();
    assert_eq!(core.stage("a").unwrap(), Stage::Absent);

    let out = prepare(&core, vec![claim("a", &["fuse", "vfio-0"])]);
    assert_eq!(
        devices_of(&out, "a"),
        Ok(vec!["fuse".into(), "vfio-0".into()])
    );
    assert_eq!(core.stage("a").unwrap(), Stage::Completed);
    assert_eq!(node.applied(), BTreeSet::from(["0000:01:00.0".to_string()]));
    let rec = core.record("a").unwrap().expect("record written");
    assert_eq!(rec.pods[0].containers[0].devices, ["fuse", "vfio-0"]);
    // The setup's edits replaced the device's own.
    let vfio = rec.devices.iter().find(|d| d.name == "vfio-0").unwrap();
    assert_eq!(vfio.edits.device_nodes[0].path, "/dev/vfio/7");

    let out = unprepare(&core, &["a"]);
    assert!(out["a"].is_ok());
    assert_eq!(core.stage("a").unwrap(), Stage::Absent);
    assert!(core.record("a").unwrap().is_none());
    assert!(node.applied().is_empty());
}

#[test]
fn preparing_again_refreshes_the_pods_without_setting_up_again() {
    let node = Node::new();
    let core = node.start();
    prepare(&core, vec![claim("a", &["vfio-0"])]);
    let mut again = claim("a", &["vfio-0"]);
    again.pods.push(pod("pod-late"));
    let out = prepare(&core, vec![again]);
    assert_eq!(devices_of(&out, "a"), Ok(vec!["vfio-0".into()]));
    assert_eq!(node.setup.kernel().applies, 1);
    let rec = core.record("a").unwrap().unwrap();
    let pods: Vec<&str> = rec.pods.iter().map(|p| p.uid.as_str()).collect();
    assert_eq!(pods, ["pod-a", "pod-late"]);
}

#[test]
fn a_completed_claim_whose_record_vanished_is_prepared_anew() {
    let node = Node::new();
    let core = node.start();
    prepare(&core, vec![claim("a", &["vfio-0"])]);
    graft_record::RecordStore::open(node.dir.path())
        .unwrap()
        .remove_claim("a")
        .unwrap();
    let out = prepare(&core, vec![claim("a", &["vfio-0"])]);
    assert!(out["a"].is_ok());
    assert!(core.record("a").unwrap().is_some());
    assert_eq!(node.applied().len(), 1);
    assert_eq!(node.setup.kernel().applies, 2);
}

#[test]
fn unpreparing_an_unknown_claim_or_twice_is_success() {
    let node = Node::new();
    let core = node.start();
    assert!(unprepare(&core, &["never"])["never"].is_ok());
    prepare(&core, vec![claim("a", &["fuse"])]);
    assert!(unprepare(&core, &["a"])["a"].is_ok());
    assert!(unprepare(&core, &["a"])["a"].is_ok());
}

#[test]
fn a_device_goes_to_one_claim_only() {
    let node = Node::new();
    let core = node.start();
    prepare(&core, vec![claim("a", &["vfio-0"])]);

    // Another call.
    let out = prepare(&core, vec![claim("b", &["vfio-0"])]);
    let e = claim_error(&out["b"]).to_string();
    assert!(
        e.contains("vfio-0 is already prepared for claim ns/claim-a (a)"),
        "{e}"
    );
    // The same PCI function as a whole GPU.
    let out = prepare(&core, vec![claim("c", &["gpu-0"])]);
    assert!(matches!(
        claim_error(&out["c"]),
        ClaimError::AlreadyPrepared { .. }
    ));
    // Two claims of one call.
    let out = prepare(&core, vec![claim("d", &["tun"]), claim("e", &["tun"])]);
    assert!(out["d"].is_ok());
    assert!(matches!(
        claim_error(&out["e"]),
        ClaimError::AlreadyPrepared { .. }
    ));
    // Nothing of the refused claims stays.
    for uid in ["b", "c", "e"] {
        assert_eq!(core.stage(uid).unwrap(), Stage::Absent, "{uid}");
        assert!(core.record(uid).unwrap().is_none(), "{uid}");
    }
    assert_eq!(node.setup.kernel().applies, 1);

    // Free again once unprepared.
    unprepare(&core, &["a"]);
    assert!(prepare(&core, vec![claim("b", &["vfio-0"])])["b"].is_ok());
}

#[test]
fn a_failed_setup_fails_its_claim_and_leaves_nothing() {
    let node = Node::new();
    let core = node.start();
    node.setup.kernel().failing.insert("0000:02:00.0".into());
    let out = prepare(
        &core,
        vec![claim("a", &["vfio-0", "vfio-1"]), claim("b", &["fuse"])],
    );
    let e = claim_error(&out["a"]).to_string();
    assert!(
        e.contains("device vfio-1: 0000:02:00.0 is bound to refused"),
        "{e}"
    );
    assert!(out["b"].is_ok());
    assert_eq!(core.stage("a").unwrap(), Stage::Absent);
    assert!(core.record("a").unwrap().is_none());
    // vfio-0 was set up before vfio-1 failed: undone with it.
    assert!(node.applied().is_empty());
}

#[test]
fn a_record_against_the_policy_fails_its_claim() {
    let node = Node::new();
    let core = node.start();
    let mut bad = char_device("fuse", 229);
    bad.edits.mounts.push(graft_record::Mount {
        source: "/etc".into(),
        destination: "/etc/host".into(),
        kind: "bind".into(),
        options: vec!["ro".into()],
    });
    let mut devices = inventory();
    devices[0] = bad;
    core.set_inventory(&devices);
    let out = prepare(&core, vec![claim("a", &["fuse", "vfio-0"])]);
    let e = claim_error(&out["a"]);
    assert!(matches!(e, ClaimError::Policy { .. }), "{e}");
    assert_eq!(core.stage("a").unwrap(), Stage::Absent);
    assert!(node.applied().is_empty());
}

#[test]
fn claims_fail_whole_while_graft_nri_is_not_ready() {
    let node = Node::new();
    let core = node
        .start()
        .with_gate(Box::new(Gate(Err("no status file".into()))));
    let out = prepare(&core, vec![claim("a", &["fuse"]), claim("b", &["tun"])]);
    for uid in ["a", "b"] {
        let e = claim_error(&out[uid]).to_string();
        assert!(
            e.contains("graft-nri is not ready") && e.contains("no status file"),
            "{e}"
        );
        assert_eq!(core.stage(uid).unwrap(), Stage::Absent);
    }
}

#[test]
fn devices_not_on_this_node_and_unreadable_pods_are_named() {
    let node = Node::new();
    let core = node.start();
    let mut elsewhere = claim("a", &["fuse"]);
    elsewhere.results[0].pool = "node-b".into();
    let mut missing = claim("b", &["kvm"]);
    missing.results[0].request = "r/sub".into();
    let mut pods = claim("c", &["tun"]);
    pods.pod_errors.push("pod ns/p: timed out".into());
    let out = prepare(&core, vec![elsewhere, missing, pods]);
    assert_eq!(
        claim_error(&out["a"]).to_string(),
        "device node-b/fuse of request r is not in this node's pool node-a"
    );
    assert_eq!(
        claim_error(&out["b"]).to_string(),
        "device kvm (request r/sub) is not present on node node-a"
    );
    assert_eq!(claim_error(&out["c"]).to_string(), "pod ns/p: timed out");
}

#[test]
fn sharing_a_gpu_sets_its_time_slice_once_per_claim_and_both_get_it() {
    let node = Node::new();
    let core = node.start();
    let out = prepare(&core, vec![shared("a"), shared("b")]);
    assert!(out["a"].is_ok() && out["b"].is_ok(), "{out:?}");
    let k = node.setup.kernel();
    assert_eq!(k.applies, 2);
    assert_eq!(
        k.most_on_one_device, 1,
        "setups of one device never overlap"
    );
}

/// Configuration every device of the claim gets is stored once, as the claim's own env
/// (record version 2); configuration for some requests only stays with those devices.
#[test]
fn a_claims_shared_configuration_env_is_stored_once() {
    let node = Node::new();
    let core = node.start();
    let mut c = claim("a", &["fuse", "vfio-0"]);
    c.results[1].request = "other".into();
    let config = |requests: serde_json::Value, env: serde_json::Value| {
        serde_json::from_value(serde_json::json!({
            "source": "FromClaim", "requests": requests,
            "opaque": {"driver": "graft.dev", "parameters": {
                "apiVersion": "graft.dev/v1alpha1", "kind": "DeviceConfig", "env": env}}
        }))
        .unwrap()
    };
    c.configs = vec![
        config(
            serde_json::json!(["r"]),
            serde_json::json!({"PROXY": "p", "ONLY_R": "1"}),
        ),
        config(
            serde_json::json!(["other"]),
            serde_json::json!({"PROXY": "p"}),
        ),
    ];
    c.pods[0].containers[0].requests = vec![Some("r".into()), Some("other".into())];
    let out = prepare(&core, vec![c]);
    assert!(out["a"].is_ok(), "{out:?}");
    let rec = core.record("a").unwrap().unwrap();
    assert_eq!(rec.version, 2);
    let names = |env: &[graft_record::EnvVar]| -> Vec<String> {
        env.iter()
            .map(|v| format!("{}={}", v.name, v.value))
            .collect()
    };
    assert_eq!(names(&rec.env), ["PROXY=p"]);
    let fuse = rec.devices.iter().find(|d| d.name == "fuse").unwrap();
    assert!(names(&fuse.edits.env).contains(&"ONLY_R=1".to_string()));
    assert!(!names(&fuse.edits.env).contains(&"PROXY=p".to_string()));
    let vfio = rec.devices.iter().find(|d| d.name == "vfio-0").unwrap();
    assert!(!names(&vfio.edits.env).contains(&"PROXY=p".to_string()));

    // Without configuration the record stays at version 1, as earlier releases wrote it.
    assert!(unprepare(&core, &["a"])["a"].is_ok());
    prepare(&core, vec![claim("b", &["fuse"])]);
    let rec = core.record("b").unwrap().unwrap();
    assert_eq!((rec.version, rec.env.len()), (1, 0));
}
