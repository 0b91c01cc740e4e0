//! Rules of the codebase that no compiler lint checks, enforced over every workspace crate's
//! sources (plain text scans: no testbed, nothing built).
//!
//! - Libraries use `thiserror` types, not `Result<_, String>` or `type Err = String`: an
//!   error must name what was wrong, and callers must be able to tell cases apart. Binary
//!   entry points (`src/main.rs`, `src/bin/`, a `[[bin]]`'s `path`) and tests are exempt.

use std::fs;
use std::path::{Path, PathBuf};

/// The workspace root: the directory above this crate.
fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// The `members` of the root manifest, read without a TOML parser (the list is strings).
fn members(manifest: &str) -> Vec<String> {
    let Some(start) = manifest.find("members") else {
        return Vec::new();
    };
    let rest = &manifest[start..];
    let (Some(open), Some(close)) = (rest.find('['), rest.find(']')) else {
        return Vec::new();
    };
    rest[open + 1..close]
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// The `path`s of a crate manifest's `[[bin]]` targets (`src/graft_mps.rs`).
fn bin_paths(manifest: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut in_bin = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if let Some(v) = line.strip_prefix("path").map(str::trim_start) {
            if let (true, Some(v)) = (in_bin, v.strip_prefix('=')) {
                out.push(PathBuf::from(v.trim().trim_matches('"')));
            }
        }
    }
    out
}

/// Whether `rel` (relative to a crate's `src/`) is test-only or a binary's entry point.
fn exempt(rel: &Path) -> bool {
    let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let under = |dir: &str| rel.components().any(|c| c.as_os_str() == dir);
    rel == Path::new("main.rs")
        || rel.starts_with("bin")
        || under("tests")
        || name == "tests.rs"
        || name.ends_with("_tests.rs")
}

/// Every `.rs` file below `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<_> = fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let path = e.path();
        if e.file_type()?.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// `text` with each `#[cfg(test)]` module block (the attribute at column 0, then `mod`,
/// up to the `}` at column 0) blanked; lines are kept so that line numbers still hold.
fn without_test_modules(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_end() == "#[cfg(test)]" {
            // Other attributes (`#[path = ...]`) may come between it and the `mod`.
            let mut j = i + 1;
            while j < lines.len() && lines[j].starts_with("#[") {
                j += 1;
            }
            let item = lines.get(j).copied().unwrap_or_default();
            let is_mod = item.starts_with("mod ") || item.starts_with("pub mod ");
            if is_mod && item.trim_end().ends_with('{') {
                let end = (j + 1..lines.len())
                    .find(|&k| lines[k].trim_end() == "}")
                    .unwrap_or(lines.len() - 1);
                out.extend(std::iter::repeat_n("", end + 1 - i));
                i = end + 1;
                continue;
            }
        }
        out.push(lines[i]);
        i += 1;
    }
    out.join("\n")
}

/// A token of Rust source: an identifier or one punctuation character, and its line.
#[derive(Debug, Clone, PartialEq)]
struct Token {
    text: String,
    line: usize,
}

/// The identifiers and punctuation of `src`; comments, string and char literals and
/// lifetimes are left out (`->` is one token, so that it does not close a `<`).
fn tokens(src: &str) -> Vec<Token> {
    let c: Vec<char> = src.chars().collect();
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    let at = |k: usize| c.get(k).copied().unwrap_or('\0');
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            i += 2;
            while i < c.len() && !(c[i] == '*' && at(i + 1) == '/') {
                line += usize::from(c[i] == '\n');
                i += 1;
            }
            i += 2;
        } else if ch == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                // An escape may be a line continuation: its newline counts too.
                let step = if c[i] == '\\' { 2 } else { 1 };
                let end = (i + step).min(c.len());
                line += c[i..end].iter().filter(|&&x| x == '\n').count();
                i = end;
            }
            i += 1;
        } else if ch == '\'' {
            // A char literal ('a', '\n', '"'); otherwise a lifetime, skipped as a word.
            if at(i + 1) == '\\' {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            }
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let raw = (word == "r" || word == "br") && (at(i) == '"' || at(i) == '#');
            if raw {
                let hashes = c[i..].iter().take_while(|&&h| h == '#').count();
                i += hashes + 1;
                loop {
                    if i >= c.len() {
                        break;
                    }
                    let closes = c[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#');
                    line += usize::from(c[i] == '\n');
                    i += 1;
                    if closes {
                        i += hashes;
                        break;
                    }
                }
            } else {
                out.push(Token { text: word, line });
            }
        } else if ch == '-' && at(i + 1) == '>' {
            out.push(Token {
                text: "->".into(),
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                text: ch.to_string(),
                line,
            });
            i += 1;
        }
    }
    out
}

/// Whether the tokens name `String`.
fn is_string(ts: &[Token]) -> bool {
    let path: String = ts.iter().map(|t| t.text.as_str()).collect();
    matches!(
        path.as_str(),
        "String" | "std::string::String" | "alloc::string::String" | "::std::string::String"
    )
}

/// The lines of `src` holding a `Result<..., String>` or a `type Err = String`, each with
/// what was found.
fn string_errors(src: &str) -> Vec<(usize, String)> {
    let ts = tokens(&without_test_modules(src));
    let mut found = Vec::new();
    for (i, t) in ts.iter().enumerate() {
        if t.text == "Result" && ts.get(i + 1).is_some_and(|n| n.text == "<") {
            // The generic arguments at depth 1, split on their commas.
            let (mut depth, mut args, mut arg) = (0i32, Vec::new(), Vec::new());
            for n in &ts[i + 1..] {
                match n.text.as_str() {
                    "<" | "(" | "[" => depth += 1,
                    ">" | ")" | "]" => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
                if depth == 1 && n.text == "," {
                    args.push(std::mem::take(&mut arg));
                } else if !(depth == 1 && n.text == "<") {
                    arg.push(n.clone());
                }
            }
            args.push(arg);
            args.retain(|a| !a.is_empty());
            if args.len() >= 2 && args.last().is_some_and(|a| is_string(a)) {
                found.push((t.line, "Result<_, String>".to_string()));
            }
        }
        let alias = ["type", "Err", "="];
        if ts[i..].iter().take(3).map(|t| t.text.as_str()).eq(alias) {
            let value: Vec<Token> = ts[i + 3..]
                .iter()
                .take_while(|t| t.text != ";")
                .cloned()
                .collect();
            if is_string(&value) {
                found.push((t.line, "type Err = String".to_string()));
            }
        }
    }
    found
}

#[test]
fn no_string_errors_in_libraries() {
    let root = workspace_root();
    let manifest = fs::read_to_string(root.join("Cargo.toml")).expect("the root Cargo.toml");
    let crates = members(&manifest);
    assert!(crates.len() > 1, "no workspace members read: {crates:?}");
    let mut offences = Vec::new();
    let mut scanned = 0;
    for member in &crates {
        let src = root.join(member).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files).unwrap_or_else(|e| panic!("{member}/src: {e}"));
        let own = fs::read_to_string(root.join(member).join("Cargo.toml"))
            .unwrap_or_else(|e| panic!("{member}/Cargo.toml: {e}"));
        let bins = bin_paths(&own);
        for file in files {
            let rel = file.strip_prefix(&src).unwrap_or(&file);
            if exempt(rel) || bins.iter().any(|b| b == &Path::new("src").join(rel)) {
                continue;
            }
            let text = fs::read_to_string(&file).unwrap_or_else(|e| panic!("{member}: {e}"));
            scanned += 1;
            let shown = Path::new(member).join("src").join(rel);
            for (line, what) in string_errors(&text) {
                offences.push(format!("{}:{line}: {what}", shown.display()));
            }
        }
    }
    assert!(scanned > 0, "no library sources found under {crates:?}");
    assert!(
        offences.is_empty(),
        "library code must use a thiserror type, not a String, as its error \
         (CONTRIBUTING.md):\n{}",
        offences.join("\n")
    );
}

#[test]
fn the_scan_finds_string_errors_and_only_them() {
    let src = r##"
fn a() -> Result<(), String> {}
fn b() -> Result<
    Vec<u8>,
    std::string::String,
> {}
impl FromStr for X {
    type Err = String;
}
static C: OnceLock<Result<(u8, String), String>> = OnceLock::new();
// fn commented() -> Result<(), String>
fn fine() -> anyhow::Result<BTreeMap<PathBuf, String>> {
    let s = "Result<(), String>";
    let r = r#"Result<(), String>"#;
    let f: Box<dyn Fn(u8) -> Result<u8, E>> = todo!();
    let c = '"';
    let s = "continued \
             on the next line";
}
fn also_fine() -> Result<String, Error> {}
type Err = Error;

#[cfg(test)]
mod tests {
    fn t() -> Result<(), String> {}
}

fn after_tests() -> Result<u8, String> {}
"##;
    let lines: Vec<usize> = string_errors(src).into_iter().map(|(l, _)| l).collect();
    assert_eq!(lines, [2, 3, 8, 10, 28]);
}

#[test]
fn exempt_files_are_binaries_and_tests() {
    for p in [
        "main.rs",
        "bin/x.rs",
        "a/tests.rs",
        "a_tests.rs",
        "a/tests/b.rs",
    ] {
        assert!(exempt(Path::new(p)), "{p}");
    }
    for p in ["lib.rs", "a/main_loop.rs", "a/mod.rs", "testing.rs"] {
        assert!(!exempt(Path::new(p)), "{p}");
    }
    assert_eq!(
        members("members = [\"a\", \"b/c\",\n \"d\"]\n"),
        ["a", "b/c", "d"]
    );
    let manifest = "[lib]\npath = \"src/lib.rs\"\n[[bin]]\nname = \"x\"\npath = \"src/x.rs\"\n";
    assert_eq!(bin_paths(manifest), [PathBuf::from("src/x.rs")]);
}
