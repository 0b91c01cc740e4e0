//! graft-driver's libraries (graft-driver-core, graft-nvidia, graft-generic-families, and
//! graft-driver's own face) keep their modules in layers: no two files import each other,
//! directly or round a longer circle, and children do not reach back up into the items of
//! the modules that contain them (a parent holds declarations and re-exports; what its
//! children share lives in a leaf they import as siblings).
//!
//! The graph is read from the source by `integration/tests/support/module_graph.rs`, which
//! the workspace's rule tests share: every `crate::`, `super::` and `self::` path of a
//! library file (outside comments, literals and `#[cfg(test)]` modules) is an edge to the
//! deepest module file the path names. A path to a module's item counts as an edge to that
//! module; paths into one's own children do not count. The binaries (`main.rs` and the
//! files it declares, `graft_mps.rs`) are crates of their own and are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

// The graph is built by the workspace's rule tests' code (graft-integration's
// `workspace_graph` holds every crate's top-level modules to the same rule).
#[path = "../../integration/tests/support/mod.rs"]
mod support;

use support::module_graph::{circles, explain, is_ancestor, Graph};

/// Child-to-ancestor imports still allowed. Each says why.
const ALLOWED_UP: &[(&str, &str)] = &[];

/// The driver's library crates, by folder from the workspace's root.
const CRATES: &[&str] = &[
    "driver-core",
    "families/nvidia",
    "families/generic",
    "driver",
];

/// A library's graph, file by file.
fn graph_of(krate: &str) -> Graph {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(krate);
    Graph::of_crate(&root.join("src/lib.rs"), &root)
}

/// The core's graph: the largest, the one the listing prints.
fn graph() -> Graph {
    graph_of("driver-core")
}

#[test]
fn the_driver_library_has_no_import_circles() {
    assert!(
        graph().modules.len() > 20,
        "found only {:?}",
        graph().modules
    );
    let mut found = String::new();
    for krate in CRATES {
        let g = graph_of(krate);
        for group in circles(&g) {
            found += &format!("{krate}: {}\n{}", group.join(", "), explain(&g, &group));
        }
    }
    assert!(
        found.is_empty(),
        "import circles among graft-driver's modules (break them by moving the shared items \
         into a leaf both import):\n{found}"
    );
}

#[test]
fn children_do_not_import_from_their_ancestors() {
    let mut up: Vec<(String, String)> = Vec::new();
    for krate in CRATES {
        let g = graph_of(krate);
        up.extend(
            g.edges
                .keys()
                .filter(|(a, b)| is_ancestor(b, a))
                .filter(|(a, b)| !ALLOWED_UP.contains(&(a.as_str(), b.as_str())))
                .map(|(a, b)| (format!("{krate}: {a}"), b.clone())),
        );
    }
    assert!(
        up.is_empty(),
        "modules that import from a module containing them (move what they share into a \
         leaf module they import as a sibling):\n{up:#?}"
    );
}

/// The graph by top-level module, for reading (`-- --nocapture`): each module and the
/// top-level modules its files import. Prints only; the two tests above are the rules.
#[test]
fn top_level_imports_listing() {
    let g = graph();
    let top = |m: &str| m.split("::").next().unwrap_or(m).to_string();
    let mut by_top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for m in &g.modules {
        by_top.entry(top(m)).or_default();
    }
    for (a, b) in g.edges.keys() {
        let (ta, tb) = (top(a), top(b));
        if ta != tb && !tb.is_empty() {
            by_top.entry(ta).or_default().insert(tb);
        }
    }
    println!(
        "{} modules, {} import edges between files",
        g.modules.len(),
        g.edges.len()
    );
    for (m, uses) in &by_top {
        let uses: Vec<&str> = uses.iter().map(String::as_str).collect();
        println!("{m:>12} -> {}", uses.join(", "));
    }
}
