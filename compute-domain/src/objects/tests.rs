use std::collections::BTreeSet;

use super::*;

fn cd(mode: &str) -> ComputeDomain {
    serde_json::from_value(json!({
        "apiVersion": "resource.graft.dev/v1alpha1", "kind": "ComputeDomain",
        "metadata": {"name": "d", "namespace": "ns", "uid": "0000-1111"},
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "w"},
                                            "allocationMode": mode}},
    }))
    .unwrap()
}

fn place(clique: &str, slot: u32) -> Placement {
    Placement {
        clique: clique.into(),
        slot,
    }
}

#[test]
fn all_mode_asks_every_channel_of_the_clique() {
    let t = workload_template(&cd("All"), &DaemonConfig::default(), &place("u.1", 0)).unwrap();
    let spec = serde_json::to_value(&t.spec.spec).unwrap();
    let req = &spec["devices"]["requests"][0]["exactly"];
    assert_eq!(req["allocationMode"], "All");
    assert_eq!(req.get("count"), None);
    assert_eq!(
        req["selectors"][0]["cel"]["expression"],
        "device.attributes['graft.dev'].?cliqueID.orValue('') == 'u.1'"
    );
    let p = &spec["devices"]["config"][0]["opaque"]["parameters"];
    assert_eq!(p["allocationMode"], "All");
    assert_eq!(p["apiVersion"], graft_api::opaque::API_VERSION);
    assert_eq!(t.metadata.namespace.as_deref(), Some("ns"));
    // No channel pin: the clique's selector is the only one.
    assert_eq!(req["selectors"].as_array().map(Vec::len), Some(1));
}

#[test]
fn single_mode_pins_the_slot_s_channel_and_claims_name_their_domain() {
    let t = workload_template(&cd("Single"), &DaemonConfig::default(), &place("u.1", 3)).unwrap();
    let spec = serde_json::to_value(&t.spec.spec).unwrap();
    let req = &spec["devices"]["requests"][0]["exactly"];
    assert_eq!(req["allocationMode"], "ExactCount");
    assert_eq!(
        req["selectors"],
        json!([
            {"cel": {"expression": "device.attributes['graft.dev'].?cliqueID.orValue('') == 'u.1'"}},
            {"cel": {"expression": "device.attributes['graft.dev'].?channel.orValue(-1) == 3"}},
        ])
    );
    let meta = t.spec.metadata.unwrap();
    let labels = meta.labels.unwrap();
    assert_eq!(labels[DOMAIN_LABEL], "0000-1111");
    let ann = meta.annotations.unwrap();
    assert_eq!(ann[NAME_ANNOTATION], "d");
    assert_eq!(ann[NAMESPACE_ANNOTATION], "ns");
}

#[test]
fn daemons_take_an_imex_daemon_device_of_the_clique_on_the_slot_s_ports() {
    let cfg = DaemonConfig::default();
    let t = daemon_template(&cd("Single"), &cfg, &place("u.2", 2)).unwrap();
    let spec = serde_json::to_value(&t.spec.spec).unwrap();
    assert_eq!(
        spec["devices"]["requests"][0]["exactly"]["selectors"],
        json!([
            {"cel": {"expression": "device.attributes['graft.dev'].?type.orValue('') == 'imex-daemon'"}},
            {"cel": {"expression": "device.attributes['graft.dev'].?cliqueID.orValue('') == 'u.2'"}},
        ])
    );
    let ds = daemonset(&cd("Single"), &cfg, &place("u.2", 2), &BTreeSet::new()).unwrap();
    let pod = serde_json::to_value(ds.spec.unwrap().template.spec.unwrap()).unwrap();
    let env = pod["containers"][0]["env"].as_array().unwrap().clone();
    let get = |k: &str| {
        env.iter()
            .find(|e| e["name"] == k)
            .and_then(|e| e["value"].as_str().map(str::to_string))
    };
    assert_eq!(get("GRAFT_IMEX_SERVER_PORT").as_deref(), Some("50020"));
    assert_eq!(get("GRAFT_IMEX_CMD_PORT").as_deref(), Some("50025"));
    assert_eq!(get("COMPUTE_DOMAIN_CLIQUE").as_deref(), Some("u.2"));
    assert!(daemonset(
        &cd("Single"),
        &cfg,
        &place("u.2", slot::MAX_SLOTS),
        &BTreeSet::new()
    )
    .is_err());
}

#[test]
fn daemons_run_on_the_members_by_name_not_where_a_label_is() {
    let members = BTreeSet::from(["a".to_string()]);
    let ds = daemonset(
        &cd("Single"),
        &DaemonConfig::default(),
        &place("u.1", 0),
        &members,
    )
    .unwrap();
    let spec = ds.spec.unwrap();
    // A member joining must not replace the other members' daemons.
    assert_eq!(
        spec.update_strategy.and_then(|u| u.type_).as_deref(),
        Some("OnDelete")
    );
    let pod = spec.template.spec.unwrap();
    assert!(pod.node_selector.is_none(), "{:?}", pod.node_selector);
    let terms = pod
        .affinity
        .and_then(|a| a.node_affinity)
        .and_then(|a| a.required_during_scheduling_ignored_during_execution)
        .unwrap()
        .node_selector_terms;
    assert_eq!(terms.len(), 1);
    let f = &terms[0].match_fields.as_ref().unwrap()[0];
    assert_eq!(
        (f.key.as_str(), f.values.as_deref()),
        ("metadata.name", Some(&["a".to_string()][..]))
    );
    assert_eq!(ds.metadata.name.as_deref(), Some("imex-0000-1111"));
}

#[test]
fn daemon_pods_use_the_node_network_the_driver_root_and_a_readiness_check() {
    let cfg = DaemonConfig {
        driver_root: "/run/nvidia/driver".into(),
        service_account: Some("graft-imex-daemon".into()),
        command: vec!["/usr/bin/graft-imex-daemon".into()],
        ..Default::default()
    };
    let ds = daemonset(&cd("Single"), &cfg, &place("u.1", 0), &BTreeSet::new()).unwrap();
    let pod = serde_json::to_value(ds.spec.unwrap().template.spec.unwrap()).unwrap();
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    assert_eq!(pod["serviceAccountName"], "graft-imex-daemon");
    let c = &pod["containers"][0];
    assert_eq!(
        c["readinessProbe"]["exec"]["command"],
        json!(["/usr/bin/graft-imex-daemon", "--check"])
    );
    let mount = &c["volumeMounts"][0];
    assert_eq!(mount["mountPath"], DAEMON_DRIVER_ROOT);
    assert_eq!(mount["readOnly"], true);
    assert_eq!(pod["volumes"][0]["hostPath"]["path"], "/run/nvidia/driver");
}

#[test]
fn daemon_pods_drop_every_capability_and_tolerate_gpu_taints() {
    let ds = daemonset(
        &cd("Single"),
        &DaemonConfig::default(),
        &place("u.1", 0),
        &BTreeSet::new(),
    )
    .unwrap();
    let pod = serde_json::to_value(ds.spec.unwrap().template.spec.unwrap()).unwrap();
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let sc = &pod["containers"][0]["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert!(sc.get("privileged").is_none() && sc["capabilities"].get("add").is_none());
    assert_eq!(
        pod["tolerations"],
        json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    );
}

#[test]
fn clique_ids_that_could_break_cel_are_refused() {
    assert!(valid_clique("5f1c3f7e-1b2a-4c3d-9e8f-000000000000.7"));
    assert!(!valid_clique("u.1' || true || '"));
    assert!(!valid_clique(""));
}

#[test]
fn a_domain_without_uid_is_refused() {
    let mut d = cd("Single");
    d.metadata.uid = None;
    let e = identity(&d).unwrap_err().to_string();
    assert!(e.contains("ns/d"), "{e}");
}
