//! graft-driver's library keeps its modules in layers: no two files import each other,
//! directly or round a longer circle, and children do not reach back up into the items of
//! the modules that contain them (a parent holds declarations and re-exports; what its
//! children share lives in a leaf they import as siblings).
//!
//! The graph is read from the source: every `crate::`, `super::` and `self::` path of a
//! file (outside comments and its `#[cfg(test)] mod tests { .. }` block) is an edge to the deepest module
//! file the path names. A path to a module's item counts as an edge to that module; paths
//! into one's own children do not count. The binaries (`main.rs` and the files it declares,
//! `graft_mps.rs`) are not part of the library and are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Files of the binaries, not the library: `main.rs`, the modules it declares, and
/// graft-mps's `graft_mps.rs`.
fn binary_files(src: &Path) -> Vec<String> {
    let main = std::fs::read_to_string(src.join("main.rs")).expect("reading main.rs");
    let declared = main.lines().filter_map(|l| {
        let name = l.trim().strip_prefix("mod ")?.strip_suffix(';')?;
        Some(name.trim().to_string())
    });
    ["main", "graft_mps"]
        .map(str::to_string)
        .into_iter()
        .chain(declared)
        .collect()
}

/// Child-to-ancestor imports still allowed. Each says why.
const ALLOWED_UP: &[(&str, &str)] = &[];

struct Graph {
    modules: BTreeSet<String>,
    edges: BTreeSet<(String, String)>,
}

fn module_name(src: &Path, binary: &[String], file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?.with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    // Out-of-line tests are not part of the layering.
    if parts.iter().any(|p| p == "tests" || p.ends_with("_tests")) {
        return None;
    }
    if parts.len() == 1 && binary.contains(&parts[0]) {
        return None;
    }
    Some(parts.join("::"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("reading driver/src") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module a path names, resolved from `from`: the deepest existing module prefix.
fn resolve(modules: &BTreeSet<String>, from: &str, path: &[&str]) -> Option<String> {
    let mut base: Vec<&str> = match path.first()? {
        &"crate" => Vec::new(),
        &"super" | &"self" => from.split("::").filter(|s| !s.is_empty()).collect(),
        _ => return None,
    };
    let mut rest = path;
    if rest[0] == "crate" {
        rest = &rest[1..];
    } else {
        while let Some(&s) = rest.first() {
            match s {
                "super" => {
                    base.pop();
                }
                "self" => {}
                _ => break,
            }
            rest = &rest[1..];
        }
    }
    let mut best = None;
    for i in 0..=rest.len() {
        let name = base.iter().chain(&rest[..i]).copied().collect::<Vec<_>>();
        let name = name.join("::");
        if modules.contains(&name) {
            best = Some(name);
        }
    }
    best
}

/// Every `crate::`/`super::`/`self::` path in `code`, with `{a, b::c}` groups expanded one
/// level (enough for this crate's imports).
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .any(|s| bytes[i..].starts_with(s.as_bytes()));
        if !starts || (i > 0 && (is_ident(bytes[i - 1]) || bytes[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < bytes.len() && (is_ident(bytes[j]) || bytes[j] == b':') {
            j += 1;
        }
        let head: Vec<String> = code[i..j]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        if bytes.get(j) == Some(&b'{') {
            let end = code[j..].find('}').map_or(bytes.len(), |k| j + k);
            for item in code[j + 1..end].split(',') {
                let item = item.split(" as ").next().unwrap_or("").trim();
                let mut p = head.clone();
                p.extend(
                    item.split("::")
                        .map(|s| s.trim_matches(|c: char| !is_ident(c as u8)).to_string())
                        .filter(|s| !s.is_empty()),
                );
                out.push(p);
            }
            i = end;
        } else {
            out.push(head);
            i = j;
        }
    }
    out
}

fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let binary = binary_files(&src);
    let mut code = BTreeMap::new();
    for f in files {
        if let Some(name) = module_name(&src, &binary, &f) {
            let text = std::fs::read_to_string(&f).expect("reading a source file");
            // In-line unit tests may reach anywhere.
            let text = match text.find("#[cfg(test)]\nmod tests {") {
                Some(k) => &text[..k],
                None => &text,
            };
            // Comments (doc links included) are not imports.
            let text: String = text
                .lines()
                .map(|l| match l.find("//") {
                    Some(k) => &l[..k],
                    None => l,
                })
                .collect::<Vec<_>>()
                .join("\n");
            code.insert(name, text);
        }
    }
    let modules: BTreeSet<String> = code.keys().cloned().collect();
    let mut edges = BTreeSet::new();
    for (from, text) in &code {
        for p in paths(text) {
            let p: Vec<&str> = p.iter().map(String::as_str).collect();
            if let Some(to) = resolve(&modules, from, &p) {
                let into_own_child = to.starts_with(&format!("{from}::")) || from.is_empty();
                if to != *from && !into_own_child {
                    edges.insert((from.clone(), to));
                }
            }
        }
    }
    Graph { modules, edges }
}

fn is_ancestor(a: &str, of: &str) -> bool {
    a.is_empty() || of.starts_with(&format!("{a}::"))
}

/// Strongly connected groups of more than one module, over the edges that are not
/// child-to-ancestor (those are counted on their own).
fn circles(g: &Graph) -> Vec<Vec<String>> {
    let next = |m: &str| -> Vec<String> {
        g.edges
            .iter()
            .filter(|(a, b)| a == m && !is_ancestor(b, a))
            .map(|(_, b)| b.clone())
            .collect()
    };
    let reach = |start: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![start.to_string()];
        while let Some(m) = todo.pop() {
            for n in next(&m) {
                if seen.insert(n.clone()) {
                    todo.push(n);
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<String, BTreeSet<String>> =
        g.modules.iter().map(|m| (m.clone(), reach(m))).collect();
    let mut groups: Vec<Vec<String>> = Vec::new();
    let mut placed = BTreeSet::new();
    for m in &g.modules {
        if placed.contains(m) || !reachable[m].contains(m) {
            continue;
        }
        let group: Vec<String> = g
            .modules
            .iter()
            .filter(|o| reachable[m].contains(*o) && reachable[*o].contains(m))
            .cloned()
            .collect();
        placed.extend(group.iter().cloned());
        groups.push(group);
    }
    groups
}

#[test]
fn the_driver_library_has_no_import_circles() {
    let g = graph();
    assert!(g.modules.len() > 20, "found only {:?}", g.modules);
    let found = circles(&g);
    assert!(
        found.is_empty(),
        "import circles among graft-driver's modules (break them by moving the shared items \
         into a leaf both import):\n{found:#?}"
    );
}

#[test]
fn children_do_not_import_from_their_ancestors() {
    let g = graph();
    let up: Vec<(String, String)> = g
        .edges
        .iter()
        .filter(|(a, b)| is_ancestor(b, a))
        .filter(|(a, b)| !ALLOWED_UP.contains(&(a.as_str(), b.as_str())))
        .cloned()
        .collect();
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
    for (a, b) in &g.edges {
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
