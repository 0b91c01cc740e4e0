//! Tests of `inject`.

use super::*;

fn plan_with(vars: &[(&str, &str)]) -> Plan {
    let mut p = Plan::default();
    for (n, v) in vars {
        p.edits.env.push(EnvVar {
            name: n.to_string(),
            value: v.to_string(),
        });
        p.env_owners.insert(n.to_string(), "ns/claim".into());
    }
    p
}

#[test]
fn a_claim_never_replaces_the_containers_own_variable() {
    let own = ["HTTPS_PROXY=http://pod".to_string(), "HOSTNAME".to_string()];
    let e = plan_with(&[("HTTPS_PROXY", "http://evil")])
        .check_container_env(&own)
        .unwrap_err()
        .to_string();
    assert!(e.contains("HTTPS_PROXY") && e.contains("ns/claim"), "{e}");
    assert!(!e.contains("http://"), "values are not named: {e}");
    assert!(plan_with(&[("HOSTNAME", "x")])
        .check_container_env(&own)
        .is_err());
    // New variables, identical values and graft's own are fine.
    assert!(plan_with(&[("MY_VAR", "1"), ("HTTPS_PROXY", "http://pod")])
        .check_container_env(&own)
        .is_ok());
    let cuda = ["NVIDIA_VISIBLE_DEVICES=all".to_string()];
    // A version-2 record's own env is planned like a device's, and checked the same.
    let rec: ClaimRecord = serde_json::from_value(serde_json::json!({"version": 2,
        "claim": {"uid": "c", "namespace": "ns", "name": "claim"},
        "devices": [{"name": "d", "edits": {"env": [{"name": "D", "value": "1"}]}}],
        "env": [{"name": "HTTPS_PROXY", "value": "http://evil"}],
        "pods": [{"uid": "p", "containers": [{"name": "app", "devices": ["d"]}]}]}))
    .unwrap();
    let policy = InjectionPolicy::new(std::path::Path::new("/s"), "/hook", &[]).unwrap();
    let p = plan(&[rec], "p", "app", &policy).unwrap().unwrap();
    let names: Vec<_> = p.edits.env.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["HTTPS_PROXY", "D"]);
    assert!(p.check_container_env(&own).is_err());
    assert!(plan_with(&[("NVIDIA_VISIBLE_DEVICES", "void")])
        .check_container_env(&cuda)
        .is_ok());
}
