//! How the workspace's code may depend on itself, read from the sources and manifests
//! (plain text, nothing built):
//!
//! - Within each crate, no two top-level modules import each other, directly or round a
//!   longer circle, so that a layering can be read and a module understood from those below
//!   it. None is left: `ALLOWED_CIRCLES`, where a known circle would be listed until it
//!   went, is empty.
//!   (`driver/tests/module_graph.rs` holds graft-driver's files to the same rule.)
//! - Each crate depends (`[dependencies]`) only on the workspace crates `ALLOWED_DEPS` gives
//!   it: the contract crates stay leaves, and no product crate pulls in the test harness or
//!   the fakes. ARCHITECTURE.md has the same table.

mod support;

use std::collections::BTreeSet;
use std::path::Path;

use support::module_graph::{circles, explain, paths, roots, Graph};
use support::source::{members, tokens, workspace_root};

/// Import circles still present: crate root, the modules in the circle (sorted), and why it
/// stays. The test fails when one grows, shrinks or goes, so that the list only shrinks. The
/// last (graft-driver's core naming the NVIDIA family's configuration part) went when the
/// families registered their parts (`opaque::OpaqueFamily`).
const ALLOWED_CIRCLES: &[(&str, &[&str], &str)] = &[];

/// The workspace crates each crate may depend on. Leaves first: the contract and protocol
/// crates and telemetry depend on no other graft crate, the daemons' runtime on telemetry
/// only; the daemons and tools on those (graft-nri also on its SDK, graft-driver on its core
/// and its families); the harness on what it drives. No product crate depends on graft-integration or the fakes (those are loaded as
/// libraries by the tests).
const ALLOWED_DEPS: &[(&str, &[&str])] = &[
    ("graft-api", &[]),
    ("graft-proto", &[]),
    ("graft-record", &[]),
    ("graft-ldcache", &[]),
    ("graft-telemetry", &[]),
    ("graft-runtime", &["graft-telemetry"]),
    ("graft-nri-sdk", &["graft-proto"]),
    (
        "graft-nri",
        &[
            "graft-proto",
            "graft-nri-sdk",
            "graft-record",
            "graft-telemetry",
            "graft-runtime",
        ],
    ),
    // graft-driver's core names no family; each family depends on the core, never on
    // another family; graft-driver (the registry and the binaries) on the core and every
    // family.
    (
        "graft-driver-core",
        &[
            "graft-api",
            "graft-proto",
            "graft-record",
            "graft-telemetry",
            "graft-runtime",
        ],
    ),
    (
        "graft-nvidia",
        &[
            "graft-driver-core",
            "graft-api",
            "graft-record",
            "graft-ldcache",
        ],
    ),
    (
        "graft-generic-families",
        &["graft-driver-core", "graft-api", "graft-record"],
    ),
    (
        "graft-driver",
        &[
            "graft-driver-core",
            "graft-nvidia",
            "graft-generic-families",
            "graft-api",
            "graft-record",
            "graft-telemetry",
            "graft-runtime",
        ],
    ),
    ("graft-hook", &["graft-ldcache", "graft-record"]),
    (
        "graft-compute-domain",
        &["graft-api", "graft-telemetry", "graft-runtime"],
    ),
    (
        "graft-scheduler-extender",
        &["graft-api", "graft-telemetry", "graft-runtime"],
    ),
    ("graftctl", &["graft-api", "graft-record"]),
    ("kubectl-graft", &[]),
    (
        "graft-integration",
        &[
            "graft-api",
            "graft-driver",
            // graft-null-nri, the benches' floor for an NRI plugin on graft's SDK.
            "graft-nri-sdk",
            "graft-proto",
            "graft-record",
            "graft-telemetry",
        ],
    ),
    ("graft-fake-nvml", &[]),
    ("graft-fake-cuda", &[]),
];

#[test]
fn no_import_circles_in_any_crate() {
    let root = workspace_root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("the root Cargo.toml");
    let mut found = Vec::new();
    let mut crates = 0;
    for member in members(&manifest) {
        for file in roots(&root.join(&member)) {
            crates += 1;
            let shown = file
                .strip_prefix(&root)
                .unwrap_or(&file)
                .display()
                .to_string();
            let g = Graph::of_crate(&file, &root).top_level();
            for group in circles(&g) {
                found.push((shown.clone(), group.clone(), explain(&g, &group)));
            }
        }
    }
    assert!(crates > 16, "only {crates} crates read");
    let mut wrong = String::new();
    for (krate, group, why) in &found {
        let allowed = ALLOWED_CIRCLES
            .iter()
            .find(|(c, _, _)| c == krate)
            .map(|(_, g, _)| g.iter().map(|m| m.to_string()).collect::<BTreeSet<_>>());
        let group_set: BTreeSet<String> = group.iter().cloned().collect();
        match allowed {
            Some(a) if a == group_set => continue,
            Some(a) if group_set.is_subset(&a) => wrong.push_str(&format!(
                "{krate}: the allowed circle shrank to {group:?}: narrow ALLOWED_CIRCLES to it\n"
            )),
            _ => wrong.push_str(&format!("{krate}: {}\n{why}", group.join(", "))),
        }
    }
    for (krate, group, _) in ALLOWED_CIRCLES {
        if !found.iter().any(|(k, _, _)| k == krate) {
            wrong.push_str(&format!(
                "{krate}: the allowed circle {group:?} is gone: take it out of ALLOWED_CIRCLES\n"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "import circles between a crate's top-level modules (break each by moving what both \
         sides use into the lower module, or into a leaf both import):\n{wrong}"
    );
}

/// A manifest's `[package]` name.
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if let (true, Some(v)) = (in_package, line.strip_prefix("name")) {
            return Some(
                v.trim_start()
                    .strip_prefix('=')?
                    .trim()
                    .trim_matches('"')
                    .into(),
            );
        }
    }
    None
}

/// The normal dependencies a manifest names (`[dependencies]` and target-specific ones;
/// not dev or build): `name.workspace = true`, `name = ..`, `[dependencies.name]`, and the
/// `package = ".."` of a renamed one.
fn dependencies(manifest: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut normal = false;
    for line in manifest.lines().map(str::trim) {
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']');
            let table = header.rsplit_once(".dependencies.").map(|(_, n)| n);
            let table = table.or_else(|| header.strip_prefix("dependencies."));
            normal = header == "dependencies" || header.ends_with(".dependencies");
            if let Some(name) = table {
                out.insert(name.trim_matches('"').to_string());
            }
            continue;
        }
        if !normal || line.starts_with('#') || line.is_empty() {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim().trim_end_matches(".workspace").trim_matches('"');
        let renamed = value.split_once("package").and_then(|(_, v)| {
            let v = v
                .trim_start()
                .strip_prefix('=')?
                .trim_start()
                .strip_prefix('"')?;
            v.split_once('"').map(|(name, _)| name.to_string())
        });
        out.insert(renamed.unwrap_or_else(|| key.to_string()));
    }
    out
}

#[test]
fn crates_depend_only_as_allowed() {
    let root = workspace_root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("the root Cargo.toml");
    let mut crates = Vec::new();
    for member in members(&manifest) {
        let path = Path::new(&member).join("Cargo.toml");
        let text = std::fs::read_to_string(root.join(&path))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = package_name(&text).unwrap_or_else(|| panic!("{}: no name", path.display()));
        crates.push((name, dependencies(&text)));
    }
    let names: BTreeSet<&str> = crates.iter().map(|(n, _)| n.as_str()).collect();
    let mut wrong = Vec::new();
    for (name, deps) in &crates {
        let Some((_, allowed)) = ALLOWED_DEPS.iter().find(|(n, _)| n == name) else {
            wrong.push(format!(
                "{name}: not in ALLOWED_DEPS (add it, with what it may use)"
            ));
            continue;
        };
        for dep in deps.iter().filter(|d| names.contains(d.as_str())) {
            if !allowed.contains(&dep.as_str()) {
                wrong.push(format!("{name} may not depend on {dep}"));
            }
        }
    }
    for (name, allowed) in ALLOWED_DEPS {
        for n in std::iter::once(name).chain(allowed.iter()) {
            if !names.contains(n) {
                wrong.push(format!(
                    "ALLOWED_DEPS names {n}, which is no workspace crate"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "workspace dependencies outside the layering (ARCHITECTURE.md):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_readers_find_paths_and_dependencies() {
    let src = r#"
use crate::a::{b::{self, C}, d as e};
use super::f::*;
fn g(x: crate::h::I) { let s = "crate::j::K"; } // crate::l
pub(crate) fn m() { self::n::o(); let _ = |p: crate::q::R| p; }
"#;
    let found: Vec<String> = paths(&tokens(src))
        .into_iter()
        .map(|(line, p)| format!("{line} {}", p.join("::")))
        .collect();
    let want = [
        "2 crate::a::b::self",
        "2 crate::a::b::C",
        "2 crate::a::d",
        "3 super::f",
        "4 crate::h::I",
        "5 self::n::o",
        "5 crate::q::R",
    ];
    assert_eq!(found, want);
    let manifest = r#"
[package]
name = "graft-x"
[dependencies]
graft-a.workspace = true
graft-b = { workspace = true, features = ["y"] }
other = { package = "graft-c", path = "../c" }
[target.'cfg(unix)'.dependencies]
graft-d = "1"
[dependencies.graft-e]
path = "../e"
[dev-dependencies]
graft-f.workspace = true
[build-dependencies]
graft-g.workspace = true
"#;
    assert_eq!(package_name(manifest).as_deref(), Some("graft-x"));
    let deps: Vec<String> = dependencies(manifest).into_iter().collect();
    assert_eq!(
        deps,
        ["graft-a", "graft-b", "graft-c", "graft-d", "graft-e"]
    );
}
