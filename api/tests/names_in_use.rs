//! The attribute names users see, against the contract: every attribute the chart, the
//! examples and the docs select on or constrain by is one graft publishes
//! ([`graft_api::attributes::ALL`]), so that a rename in the crate fails here until they
//! follow. Only the two attribute syntaxes count: CEL's `device.attributes['graft.dev'].x`
//! (or `.?x`, either quote) and `matchAttribute: graft.dev/x`; label keys and extended
//! resource names (`graft.dev/fuse` under `resources.limits`) are other namespaces.

use std::path::{Path, PathBuf};

use graft_api::{attributes, DRIVER};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The leading CEL identifier of `s` (`[A-Za-z_][A-Za-z0-9_]*`), if any.
fn ident(s: &str) -> Option<&str> {
    let end = s
        .char_indices()
        .find(|&(i, c)| !(c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())))
        .map_or(s.len(), |(i, _)| i);
    (end > 0).then(|| &s[..end])
}

/// `s` without a leading quote (`'`, `"`, or `\"` inside a JSON string).
fn unquote(s: &str) -> &str {
    let s = s.strip_prefix('\\').unwrap_or(s);
    s.strip_prefix(['\'', '"']).unwrap_or(s)
}

/// The graft attribute names one line names in CEL or in a `matchAttribute`.
fn names_in(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for (at, _) in line.match_indices("device.attributes[") {
        let rest = unquote(&line[at + "device.attributes[".len()..]);
        let Some(rest) = rest.strip_prefix(DRIVER) else {
            continue;
        };
        let rest = unquote(rest);
        let Some(rest) = rest.strip_prefix("].") else {
            continue;
        };
        out.extend(ident(rest.strip_prefix('?').unwrap_or(rest)));
    }
    for (at, _) in line.match_indices("matchAttribute") {
        let rest = unquote(&line[at + "matchAttribute".len()..]);
        let Some(rest) = rest.trim_start().strip_prefix(':') else {
            continue;
        };
        let rest = unquote(rest.trim_start());
        if let Some(rest) = rest.strip_prefix(DRIVER).and_then(|r| r.strip_prefix('/')) {
            out.extend(ident(rest));
        }
    }
    out
}

/// Every file under `dir`, sorted.
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            files_under(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// What the test reads: deploy/ (chart, manifests, examples), docs/*.md and README.md.
fn scanned() -> Vec<PathBuf> {
    let root = repo();
    let mut files = Vec::new();
    files_under(&root.join("deploy"), &mut files);
    let mut docs = Vec::new();
    files_under(&root.join("docs"), &mut docs);
    files.extend(
        docs.into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    files.push(root.join("README.md"));
    files
}

/// `(file:line, name)` of every attribute reference in the scanned files.
fn references() -> Vec<(String, String)> {
    let root = repo();
    let mut out = Vec::new();
    for file in scanned() {
        // Binary files (none today) name no attributes.
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let rel = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        for (n, line) in text.lines().enumerate() {
            for name in names_in(line) {
                out.push((format!("{rel}:{}", n + 1), name.to_string()));
            }
        }
    }
    out
}

#[test]
fn examples_and_docs_name_only_published_attributes() {
    let refs = references();
    // Not vacuous: the examples, the chart and the docs are read (by place, not by name,
    // so that a rename reports the lines below rather than failing here).
    for place in ["deploy/examples/", "deploy/helm/graft/templates/", "docs/"] {
        assert!(
            refs.iter().any(|(at, _)| at.starts_with(place)),
            "{place}: {refs:?}"
        );
    }
    let unknown: Vec<String> = refs
        .iter()
        .filter(|(_, n)| !attributes::ALL.contains(&n.as_str()))
        .map(|(at, n)| format!("{at}: {DRIVER}/{n}"))
        .collect();
    assert!(
        unknown.is_empty(),
        "attributes graft does not publish (graft_api::attributes::ALL):\n{}",
        unknown.join("\n")
    );
}

#[test]
fn the_scan_reads_both_syntaxes_and_nothing_else() {
    let cases: &[(&str, &[&str])] = &[
        (
            "device.attributes['graft.dev'].?type.orValue('')",
            &["type"],
        ),
        (
            r#"device.attributes["graft.dev"].profile == "3g""#,
            &["profile"],
        ),
        (
            r#"{"cel": {"expression": "device.attributes[\"graft.dev\"].uuid == \"x\""}}"#,
            &["uuid"],
        ),
        (
            "a.?x && device.attributes['graft.dev'].minor > 1",
            &["minor"],
        ),
        ("matchAttribute: graft.dev/nvlinkIsland", &["nvlinkIsland"]),
        (r#""matchAttribute": "graft.dev/cliqueID""#, &["cliqueID"]),
        ("matchAttribute: resource.kubernetes.io/pcieRoot", &[]),
        ("device.attributes['example.com'].type", &[]),
        ("      graft.dev/fuse: 1", &[]),
        ("resource.graft.dev/computeDomain.u: clique", &[]),
        ("`matchAttribute` makes the scheduler pick", &[]),
    ];
    for (line, want) in cases {
        assert_eq!(names_in(line), *want, "{line}");
    }
}

/// The values of a source file's `pub const X: &str = "..."` lines, sorted.
fn declared(rel: &str) -> Vec<String> {
    let src = std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let mut out: Vec<String> = src
        .lines()
        .filter_map(|l| {
            let (_, value) = l.strip_prefix("pub const ")?.split_once(": &str = \"")?;
            Some(value.strip_suffix("\";")?.to_string())
        })
        .collect();
    out.sort_unstable();
    out
}

#[test]
fn all_lists_every_constant() {
    for (rel, all) in [
        ("api/src/attributes.rs", attributes::ALL),
        ("api/src/capacity.rs", graft_api::capacity::ALL),
    ] {
        let mut all: Vec<String> = all.iter().map(|s| s.to_string()).collect();
        all.sort_unstable();
        assert_eq!(all, declared(rel), "{rel}: ALL");
    }
}

#[test]
fn names_are_unique() {
    for list in [attributes::ALL, graft_api::capacity::ALL] {
        let mut sorted = list.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), list.len(), "{list:?}");
    }
}
