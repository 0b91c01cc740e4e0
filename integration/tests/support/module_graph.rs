//! A crate's modules and the imports between them, read from the source.
//!
//! The modules are those its root file declares (`mod x;`, following `#[path]`), and theirs,
//! leaving out test-only ones (`#[cfg(test)]`, or named `tests` or `*_tests`). Every `crate::`,
//! `super::` and `self::` path of a module's file (outside comments, literals and its
//! `#[cfg(test)] mod .. { .. }` blocks) is an edge to the deepest module the path names: a
//! path to an item counts as an edge to its module, and paths into one's own children do not
//! count. A path to an item the crate root re-exports is an edge to the root, as written.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::source::{bin_paths, tokens, without_test_modules, Token};

/// The root files of a package's crates: `src/lib.rs`, `src/main.rs` or the `[[bin]]`
/// paths, and `src/bin/`'s targets.
pub fn roots(package: &Path) -> Vec<PathBuf> {
    let src = package.join("src");
    let manifest = std::fs::read_to_string(package.join("Cargo.toml")).unwrap_or_default();
    let mut out: Vec<PathBuf> = bin_paths(&manifest)
        .into_iter()
        .map(|p| package.join(p))
        .collect();
    for f in [src.join("lib.rs"), src.join("main.rs")] {
        if f.is_file() && !out.contains(&f) {
            out.push(f);
        }
    }
    if let Ok(entries) = std::fs::read_dir(src.join("bin")) {
        for e in entries.flatten() {
            let p = e.path();
            let main = p.join("main.rs");
            let f = if p.is_dir() { main } else { p };
            if f.extension().is_some_and(|x| x == "rs") && f.is_file() && !out.contains(&f) {
                out.push(f);
            }
        }
    }
    out.sort();
    out
}

/// The `mod name;` declarations of `text` that are not test-only, each with its `#[path]`.
fn declared(text: &str) -> Vec<(String, Option<String>)> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        // Attributes on the same line (`#[cfg(test)] mod x;`) count as those above it.
        let mut attrs: Vec<&str> = Vec::new();
        let mut rest = *line;
        while rest.starts_with("#[") {
            let Some(end) = rest.find(']') else { break };
            attrs.push(&rest[..=end]);
            rest = rest[end + 1..].trim_start();
        }
        let rest = match rest.strip_prefix("pub") {
            Some(r) if r.starts_with('(') => r.split_once(')').map_or("", |(_, r)| r),
            Some(r) => r,
            None => rest,
        };
        let Some(name) = rest.trim_start().strip_prefix("mod ") else {
            continue;
        };
        let Some(name) = name.trim().strip_suffix(';') else {
            continue;
        };
        let name = name.trim().to_string();
        attrs.extend(
            lines[..i]
                .iter()
                .rev()
                .take_while(|l| l.starts_with("#[") || l.starts_with("//"))
                .filter(|l| l.starts_with("#[")),
        );
        let test_only = attrs.iter().any(|a| a.replace(' ', "") == "#[cfg(test)]")
            || name == "tests"
            || name.ends_with("_tests");
        if test_only {
            continue;
        }
        let path = attrs.iter().find_map(|a| {
            let v = a.strip_prefix("#[path")?.trim_start().strip_prefix('=')?;
            Some(
                v.trim()
                    .trim_end_matches(']')
                    .trim()
                    .trim_matches('"')
                    .to_string(),
            )
        });
        out.push((name, path));
    }
    out
}

/// The crate's modules, by path from the root (`""` for the root, `a::b`), with their files.
pub fn modules(root: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut todo = vec![(String::new(), root.to_path_buf(), true)];
    while let Some((name, file, owns_dir)) = todo.pop() {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let here = file.parent().unwrap_or(Path::new("")).to_path_buf();
        // A root or `mod.rs` keeps its children beside it; `a.rs` keeps them in `a/`.
        let dir = if owns_dir {
            here.clone()
        } else {
            file.with_extension("")
        };
        for (child, path) in declared(&without_test_modules(&text)) {
            let full = if name.is_empty() {
                child.clone()
            } else {
                format!("{name}::{child}")
            };
            let (f, owns) = match path {
                Some(p) => {
                    let f = here.join(p);
                    let owns = f.file_name().is_some_and(|n| n == "mod.rs");
                    (f, owns)
                }
                None if dir.join(format!("{child}.rs")).is_file() => {
                    (dir.join(format!("{child}.rs")), false)
                }
                None => (dir.join(&child).join("mod.rs"), true),
            };
            todo.push((full, f, owns));
        }
        out.insert(name, file);
    }
    out
}

fn is_sep(ts: &[Token], k: usize) -> bool {
    ts.get(k).is_some_and(|t| t.text == ":") && ts.get(k + 1).is_some_and(|t| t.text == ":")
}

fn is_text(ts: &[Token], k: usize, text: &str) -> bool {
    ts.get(k).is_some_and(|t| t.text == text)
}

/// The paths of the use tree (or plain path) at `k` under `prefix`, each with `line`;
/// returns the index after it.
fn use_tree(
    ts: &[Token],
    mut k: usize,
    mut prefix: Vec<String>,
    line: usize,
    out: &mut Vec<(usize, Vec<String>)>,
) -> usize {
    loop {
        if is_text(ts, k, "{") {
            k += 1;
            while k < ts.len() && !is_text(ts, k, "}") {
                let next = use_tree(ts, k, prefix.clone(), line, out);
                // Past the comma, or past a token no tree starts with.
                k = if is_text(ts, next, ",") || next == k {
                    next + 1
                } else {
                    next
                };
            }
            return k + 1;
        }
        let ident = ts
            .get(k)
            .is_some_and(|t| t.text.chars().all(|c| c.is_alphanumeric() || c == '_'));
        if !ident {
            out.push((line, prefix));
            // Past a `*` or whatever ends it, so that a group's loop moves on.
            return if is_text(ts, k, "*") { k + 1 } else { k };
        }
        prefix.push(ts[k].text.clone());
        k += 1;
        if !is_sep(ts, k) {
            out.push((line, prefix));
            // Past an `as name` rename.
            return if is_text(ts, k, "as") { k + 2 } else { k };
        }
        k += 2;
    }
}

/// Every `crate::`/`super::`/`self::` path in `ts`, with `{..}` groups expanded, and the
/// line it starts on.
pub fn paths(ts: &[Token]) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut k = 0;
    while k < ts.len() {
        let head = matches!(ts[k].text.as_str(), "crate" | "super" | "self");
        // `a::self` is inside a path already; `$crate` is this crate too.
        if head && is_sep(ts, k + 1) && !(k >= 2 && is_sep(ts, k - 2)) {
            k = use_tree(ts, k, Vec::new(), ts[k].line, &mut out);
        } else {
            k += 1;
        }
    }
    out
}

/// The module a path names, resolved from `from`: the deepest existing module prefix.
pub fn resolve(modules: &BTreeSet<String>, from: &str, path: &[String]) -> Option<String> {
    let mut base: Vec<&str> = match path.first()?.as_str() {
        "crate" => Vec::new(),
        "super" | "self" => from.split("::").filter(|s| !s.is_empty()).collect(),
        _ => return None,
    };
    let mut rest = path;
    if rest[0] == "crate" {
        rest = &rest[1..];
    } else {
        while let Some(s) = rest.first() {
            match s.as_str() {
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
        let name: Vec<&str> = base
            .iter()
            .copied()
            .chain(rest[..i].iter().map(String::as_str))
            .collect();
        let name = name.join("::");
        if modules.contains(&name) {
            best = Some(name);
        }
    }
    best
}

/// A crate's modules and imports: each edge with where it was seen (`file:line path`).
pub struct Graph {
    pub modules: BTreeSet<String>,
    pub edges: BTreeMap<(String, String), BTreeSet<String>>,
}

impl Graph {
    /// The graph of the crate rooted at `root`; `shown` is where files are shown from.
    pub fn of_crate(root: &Path, shown: &Path) -> Graph {
        let files = modules(root);
        let modules: BTreeSet<String> = files.keys().cloned().collect();
        let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        for (from, file) in &files {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            let rel = file
                .strip_prefix(shown)
                .unwrap_or(file)
                .display()
                .to_string();
            for (line, p) in paths(&tokens(&without_test_modules(&text))) {
                let Some(to) = resolve(&modules, from, &p) else {
                    continue;
                };
                let into_own_child = from.is_empty() || to.starts_with(&format!("{from}::"));
                if to != *from && !into_own_child {
                    let seen = format!("{rel}:{line} {}", p.join("::"));
                    edges.entry((from.clone(), to)).or_default().insert(seen);
                }
            }
        }
        Graph { modules, edges }
    }

    /// The same imports between top-level modules (the root left out).
    pub fn top_level(&self) -> Graph {
        let top = |m: &str| m.split("::").next().unwrap_or(m).to_string();
        let modules = self
            .modules
            .iter()
            .map(|m| top(m))
            .filter(|m| !m.is_empty())
            .collect();
        let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        for ((a, b), seen) in &self.edges {
            let (ta, tb) = (top(a), top(b));
            if ta != tb && !ta.is_empty() && !tb.is_empty() {
                edges
                    .entry((ta, tb))
                    .or_default()
                    .extend(seen.iter().cloned());
            }
        }
        Graph { modules, edges }
    }
}

/// Whether module `a` contains module `of` (the root contains every other).
pub fn is_ancestor(a: &str, of: &str) -> bool {
    a.is_empty() || of.starts_with(&format!("{a}::"))
}

/// Strongly connected groups of more than one module, over the edges that are not
/// child-to-ancestor (a child naming its parent's items is another rule's business).
pub fn circles(g: &Graph) -> Vec<Vec<String>> {
    let next = |m: &str| -> Vec<String> {
        g.edges
            .keys()
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

/// The edges inside `group`, each with where it was seen, for a failure message.
pub fn explain(g: &Graph, group: &[String]) -> String {
    let mut out = String::new();
    for ((a, b), seen) in &g.edges {
        if group.contains(a) && group.contains(b) && !is_ancestor(b, a) {
            let seen: Vec<&str> = seen.iter().map(String::as_str).collect();
            out.push_str(&format!("    {a} -> {b}: {}\n", seen.join("; ")));
        }
    }
    out
}
