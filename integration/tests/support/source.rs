//! Reading the workspace's sources as text: its members, their manifests, and Rust source
//! as tokens with comments and literals left out (no parser, nothing built).

use std::fs;
use std::path::{Path, PathBuf};

/// The workspace root: the directory above this crate.
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// The `members` of the root manifest, read without a TOML parser (the list is strings).
pub fn members(manifest: &str) -> Vec<String> {
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
pub fn bin_paths(manifest: &str) -> Vec<PathBuf> {
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

/// Every `.rs` file below `dir`, sorted.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
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
pub fn without_test_modules(text: &str) -> String {
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
pub struct Token {
    pub text: String,
    pub line: usize,
}

/// The identifiers and punctuation of `src`; comments, string and char literals and
/// lifetimes are left out (`->` is one token, so that it does not close a `<`).
pub fn tokens(src: &str) -> Vec<Token> {
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
