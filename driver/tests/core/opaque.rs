//! The generic parse and merge of the opaque configuration, with graft's families.

use k8s_openapi::api::resource::v1::DeviceAllocationConfiguration;

use graft_driver::discovery::nvidia::driver_files::Capability;
use graft_driver::discovery::nvidia::opaque::NvidiaOpaque;
use graft_driver::opaque::*;

/// `resolve` with graft's families.
fn resolve(
    driver: &str,
    configs: &[DeviceAllocationConfiguration],
    request: &str,
) -> Result<Option<DeviceConfig>, ConfigError> {
    graft_driver::opaque::resolve(driver, configs, request, &graft_driver::families::opaque())
}

fn nvidia(c: &DeviceConfig) -> &NvidiaOpaque {
    c.family.part::<NvidiaOpaque>().expect("NVIDIA's part")
}

fn cfgs(v: serde_json::Value) -> Vec<DeviceAllocationConfiguration> {
    serde_json::from_value(v).unwrap()
}

fn params(extra: serde_json::Value) -> serde_json::Value {
    let mut p = serde_json::json!({"apiVersion": API_VERSION, "kind": KIND});
    p.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    p
}

#[test]
fn class_before_claim_later_wins_other_drivers_skipped() {
    let c = cfgs(serde_json::json!([
        {"source": "FromClaim", "requests": ["dev"], "opaque": {"driver": "graft.dev", "parameters": params(serde_json::json!({"env": {"A": "claim"}}))}},
        {"source": "FromClass", "opaque": {"driver": "graft.dev", "parameters": params(serde_json::json!({"env": {"A": "class"}}))}},
        {"source": "FromClaim", "opaque": {"driver": "other.example.com", "parameters": {"kind": "Whatever"}}}
    ]));
    let got = resolve("graft.dev", &c, "dev/sub").unwrap().unwrap();
    assert_eq!(got.env["A"], "claim");
    let got = resolve("graft.dev", &c, "else").unwrap().unwrap();
    assert_eq!(got.env["A"], "class");
    assert!(resolve("other", &c, "dev").unwrap().is_none());
}

#[test]
fn claim_config_merges_onto_class_config_key_by_key() {
    let c = cfgs(serde_json::json!([
        {"source": "FromClaim", "opaque": {"driver": "graft.dev", "parameters": params(serde_json::json!({"env": {"B": "claim"}, "gid": 7}))}},
        {"source": "FromClass", "opaque": {"driver": "graft.dev", "parameters": params(serde_json::json!({"env": {"A": "class", "B": "class"}, "fileMode": 0o640, "gid": 5}))}},
        {"source": "FromClaim", "opaque": {"driver": "graft.dev", "parameters": params(serde_json::json!({"env": {"C": "later"}, "uid": 9}))}}
    ]));
    let got = resolve("graft.dev", &c, "r").unwrap().unwrap();
    let env: Vec<(&str, &str)> = got
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(env, [("A", "class"), ("B", "claim"), ("C", "later")]);
    assert_eq!(
        (got.file_mode, got.uid, got.gid),
        (Some(0o640), Some(9), Some(7))
    );
}

#[test]
fn driver_capabilities_are_named_and_checked() {
    let c = cfgs(serde_json::json!([
        {"source": "FromClass", "opaque": {"driver": "graft.dev", "parameters": params(serde_json::json!({"driverCapabilities": ["video"]}))}},
        {"source": "FromClaim", "opaque": {"driver": "graft.dev", "parameters": params(serde_json::json!({"driverCapabilities": ["graphics", "display"]}))}}
    ]));
    let got = resolve("graft.dev", &c, "r").unwrap().unwrap();
    assert_eq!(
        nvidia(&got).driver_capabilities,
        Some(vec![Capability::Graphics, Capability::Display])
    );
    let bad = cfgs(serde_json::json!([
        {"source": "FromClaim", "opaque": {"driver": "graft.dev", "parameters": params(serde_json::json!({"driverCapabilities": ["opengl"]}))}}
    ]));
    let e = resolve("graft.dev", &bad, "r").unwrap_err().to_string();
    assert!(e.contains("opengl") && e.contains("graphics"), "{e}");
}

#[test]
fn loader_and_graft_owned_variables_are_refused_by_name() {
    for name in [
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "PATH",
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
    ] {
        let c = cfgs(serde_json::json!([
            {"source": "FromClaim", "opaque": {"driver": "graft.dev", "parameters": params(serde_json::json!({"env": {"OK": "1", name: "x"}}))}}
        ]));
        let e = resolve("graft.dev", &c, "r").unwrap_err();
        assert_eq!(
            e.at,
            format!("status.allocation.devices.config[0].opaque.parameters.env[{name:?}].name")
        );
        assert!(e.reason.contains(name), "{e}");
    }
}

#[test]
fn an_unknown_field_is_named_with_every_known_one_as_serde_names_it() {
    let c = cfgs(serde_json::json!([
        {"source": "FromClaim", "opaque": {"driver": "graft.dev", "parameters": params(serde_json::json!({"colour": "red", "sharing": {"strategy": "TimeSlicing"}}))}}
    ]));
    let e = resolve("graft.dev", &c, "r").unwrap_err();
    assert_eq!(
        e.reason,
        "unknown field `colour`, expected one of `apiVersion`, `kind`, `env`, `fileMode`, \
         `uid`, `gid`, `sharing`, `driverCapabilities`"
    );
    let bad_family_field = cfgs(serde_json::json!([
        {"source": "FromClaim", "opaque": {"driver": "graft.dev", "parameters": params(serde_json::json!({"sharing": {"strategy": "MPS"}}))}}
    ]));
    let e = resolve("graft.dev", &bad_family_field, "r").unwrap_err();
    assert_eq!(
        e.at,
        "status.allocation.devices.config[0].opaque.parameters"
    );
    assert!(
        e.reason.contains("MPS") && e.reason.contains("TimeSlicing"),
        "{e}"
    );
}

#[test]
fn errors_name_the_field() {
    let unknown_kind = cfgs(serde_json::json!([
        {"source": "FromClaim", "opaque": {"driver": "graft.dev", "parameters": {"apiVersion": API_VERSION, "kind": "GpuConfig"}}}
    ]));
    let e = resolve("graft.dev", &unknown_kind, "r")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("config[0].opaque.parameters") && e.contains("GpuConfig"),
        "{e}"
    );

    let unknown_field = cfgs(serde_json::json!([
        {"source": "FromClass", "opaque": {"driver": "graft.dev", "parameters": params(serde_json::json!({"colour": "red"}))}}
    ]));
    let e = resolve("graft.dev", &unknown_field, "r")
        .unwrap_err()
        .to_string();
    assert!(e.contains("colour"), "{e}");

    let bad_mode = cfgs(serde_json::json!([
        {"source": "FromClass", "opaque": {"driver": "graft.dev", "parameters": params(serde_json::json!({"fileMode": 4095}))}}
    ]));
    let e = resolve("graft.dev", &bad_mode, "r").unwrap_err();
    assert_eq!(
        e.at,
        "status.allocation.devices.config[0].opaque.parameters.fileMode"
    );
}
#[test]
fn a_compute_domain_kind_is_its_familys() {
    let ch = serde_json::json!({"apiVersion": API_VERSION, "kind": "ComputeDomainChannelConfig",
        "domainID": "u-1", "domainName": "d", "domainNamespace": "ns", "allocationMode": "All"});
    let c = cfgs(serde_json::json!([
        {"source": "FromClass", "opaque": {"driver": "graft.dev", "parameters": params(serde_json::json!({"env": {"A": "class"}}))}},
        {"source": "FromClaim", "requests": ["channel"], "opaque": {"driver": "graft.dev", "parameters": ch}}
    ]));
    let got = resolve("graft.dev", &c, "channel").unwrap().unwrap();
    assert_eq!(got.env["A"], "class");
    let cd = nvidia(&got).compute_domain.clone().unwrap();
    assert_eq!(cd.domain_id(), "u-1");
    let mut bad = ch_with("colour");
    let e = resolve("graft.dev", &cfgs(bad.take()), "channel").unwrap_err();
    assert!(e.at.ends_with("config[0].opaque.parameters") && e.reason.contains("colour"));
}

#[test]
fn without_families_only_the_generic_fields_and_kind_are_known() {
    let none = OpaqueFamilies::default();
    let c = cfgs(serde_json::json!([
        {"source": "FromClaim", "opaque": {"driver": "graft.dev", "parameters": params(serde_json::json!({"sharing": {"strategy": "TimeSlicing"}}))}}
    ]));
    let e = graft_driver::opaque::resolve("graft.dev", &c, "r", &none).unwrap_err();
    assert_eq!(
        e.reason,
        "unknown field `sharing`, expected one of `apiVersion`, `kind`, `env`, `fileMode`, \
         `uid`, `gid`"
    );
    let e =
        graft_driver::opaque::resolve("graft.dev", &cfgs(ch_with("x")), "r", &none).unwrap_err();
    assert!(
        e.reason.contains("ComputeDomainDaemonConfig")
            && e.reason.contains("knows DeviceConfig of"),
        "{e}"
    );
    // The families' parts compare and merge as their families say.
    let plain = resolve("graft.dev", &cfgs(serde_json::json!([
        {"source": "FromClaim", "opaque": {"driver": "graft.dev", "parameters": params(serde_json::json!({"env": {"A": "1"}}))}}
    ])), "r").unwrap().unwrap();
    assert_eq!(plain.family, FamilyConfig::default());
    assert_eq!(plain.family.asks_sharing(), None);
}

fn ch_with(field: &str) -> serde_json::Value {
    serde_json::json!([{"source": "FromClaim", "opaque": {"driver": "graft.dev", "parameters": {
        "apiVersion": API_VERSION, "kind": "ComputeDomainDaemonConfig", "domainID": "u-1",
        "domainName": "d", "domainNamespace": "ns", "cliqueID": "c.1", "numNodes": 2,
        field: 1}}}])
}
