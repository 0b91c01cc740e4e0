//! The chart against the contract, read as files (no helm needed): its DeviceClasses are
//! exactly [`graft_api::classes::ALL`], in order (with the shared GPUs' class after
//! gpu.graft.dev and the MIG profile classes' template after mig.graft.dev), each with the
//! selector the contract
//! renders, and the ComputeDomain CRD template is the one the contract's types make.

use std::path::PathBuf;

use graft_api::classes::{gpu_shared_cel, mig_profile_cel, ALL, GPU_SHARED};

fn chart_file(rel: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/helm/graft")
        .join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Each DeviceClass of the template: its name and its CEL expression, a folded (`>-`)
/// scalar's lines joined with spaces as YAML folds them.
fn template_classes() -> Vec<(String, String)> {
    let text = chart_file("templates/30-deviceclasses.yaml");
    let mut out = Vec::new();
    for doc in text.split("\n---\n") {
        let lines: Vec<&str> = doc.lines().collect();
        let Some(name) = lines.iter().find_map(|l| l.strip_prefix("  name: ")) else {
            continue;
        };
        let at = lines
            .iter()
            .position(|l| l.trim_start().starts_with("expression:"))
            .unwrap_or_else(|| panic!("{name}: no expression"));
        let first = lines[at]
            .trim_start()
            .trim_start_matches("expression:")
            .trim();
        let expr = if first == ">-" {
            let indent = |l: &str| l.len() - l.trim_start().len();
            let base = indent(lines[at]);
            lines[at + 1..]
                .iter()
                .take_while(|l| !l.trim().is_empty() && indent(l) > base)
                .map(|l| l.trim())
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            first.to_string()
        };
        out.push((name.to_string(), expr));
    }
    out
}

#[test]
fn the_charts_device_classes_select_what_the_contract_says() {
    let chart = template_classes();
    let mut want: Vec<(String, String)> = ALL.iter().map(|c| (c.name.into(), c.cel())).collect();
    // After gpu.graft.dev, the class of its time-sliced shares.
    let gpu = want.iter().position(|(n, _)| n == "gpu.graft.dev").unwrap();
    want.insert(gpu + 1, (GPU_SHARED.into(), gpu_shared_cel()));
    // After mig.graft.dev, the template of a class per MIG profile (named by a helper).
    let mig = want.iter().position(|(n, _)| n == "mig.graft.dev").unwrap();
    want.insert(
        mig + 1,
        ("{{ $class }}".into(), mig_profile_cel("{{ $p }}")),
    );
    assert_eq!(
        chart, want,
        "templates/30-deviceclasses.yaml against graft_api::classes"
    );
}

#[test]
fn the_charts_default_classes_are_the_contracts() {
    let values: serde_json::Value = serde_norway::from_str(&chart_file("values.yaml")).unwrap();
    let listed: Vec<&str> = values["deviceClasses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let names: Vec<&str> = ALL.iter().map(|c| c.name).collect();
    assert_eq!(listed, names);
    // The classes given extended resource names exist.
    for class in values["extendedResourceNames"].as_object().unwrap().keys() {
        assert!(
            names.contains(&class.as_str()),
            "extendedResourceNames: {class}"
        );
    }
}

#[test]
fn the_charts_compute_domain_crd_is_the_contracts() {
    let text = chart_file("templates/70-compute-domain-crd.yaml");
    assert_eq!(text, graft_api::compute_domain::crd_template().unwrap());
}
