//! docs/configuration.md lists every flag and environment variable of graft's daemons, as
//! their own `--help` says (clap writes the flag, its variable, its default and its text):
//! the tables between `<!-- flags: BIN -->` and `<!-- end flags: BIN -->` are rendered from
//! it, so a flag added, renamed or re-defaulted fails this test until the doc follows.
//! `GRAFT_BLESS=1` rewrites the tables.
//!
//! Needs the workspace binaries (`cargo build --workspace --bins`).

use std::path::PathBuf;
use std::process::Command;

use graft_integration::testbed::workspace_bin;

/// The daemons an operator configures; graftctl, kubectl-graft and graft-hook have their own
/// pages (docs/graftctl.md, docs/security.md).
const DAEMONS: [&str; 6] = [
    "graft-driver",
    "graft-nri",
    "graft-mps",
    "graft-compute-domain-controller",
    "graft-scheduler-extender",
    "graft-imex-daemon",
];

/// One option of a `--help` page.
#[derive(Debug, Default, PartialEq)]
struct Opt {
    flag: String,
    env: Option<String>,
    default: Option<String>,
    text: String,
    values: Vec<String>,
}

/// Reads clap's long help: an option starts on a line indented at most six spaces with
/// `--`; its body (indented more) holds the text, `[env: X=]`, `[default: Y]`,
/// `[possible values: a, b]` or a `Possible values:` list of `- a: ...` lines.
fn parse(help: &str) -> Vec<Opt> {
    let mut opts: Vec<Opt> = Vec::new();
    let mut in_values = false;
    for line in help.lines() {
        let indent = line.len() - line.trim_start().len();
        let t = line.trim();
        if (2..=6).contains(&indent) && (t.starts_with("--") || t.starts_with('-')) {
            let flag = t
                .split(", ")
                .find(|p| p.starts_with("--"))
                .unwrap_or(t)
                .to_string();
            opts.push(Opt {
                flag,
                ..Opt::default()
            });
            in_values = false;
            continue;
        }
        let Some(o) = opts.last_mut() else { continue };
        if indent < 10 || t.is_empty() {
            continue;
        }
        if let Some(v) = t.strip_prefix("[env: ") {
            o.env = Some(v.trim_end_matches(']').trim_end_matches('=').to_string());
        } else if let Some(v) = t.strip_prefix("[default: ") {
            o.default = Some(v.trim_end_matches(']').to_string());
        } else if let Some(v) = t.strip_prefix("[possible values: ") {
            o.values = v
                .trim_end_matches(']')
                .split(", ")
                .map(String::from)
                .collect();
        } else if t == "Possible values:" {
            in_values = true;
        } else if in_values && t.starts_with("- ") {
            let v = t[2..].split(':').next().unwrap_or("").trim();
            o.values.push(v.to_string());
        } else if !t.starts_with('[') {
            if !o.text.is_empty() {
                o.text.push(' ');
            }
            o.text.push_str(t);
        }
    }
    opts.retain(|o| o.flag != "--help" && !o.flag.starts_with("--version"));
    opts
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

fn render(bin: &str, opts: &[Opt]) -> String {
    let mut out = format!(
        "<!-- flags: {bin} -->\n| flag | environment | default | what |\n|---|---|---|---|\n"
    );
    for o in opts {
        let mut text = cell(&o.text);
        if !o.values.is_empty() {
            text.push_str(&format!(" One of: {}.", o.values.join(", ")));
        }
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            cell(&o.flag),
            o.env
                .as_deref()
                .map(|e| format!("`{e}`"))
                .unwrap_or_default(),
            o.default
                .as_deref()
                .map(|d| format!("`{}`", cell(d)))
                .unwrap_or_default(),
            text
        ));
    }
    out.push_str(&format!("<!-- end flags: {bin} -->"));
    out
}

fn doc_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md")
}

fn help_of(bin: &str) -> String {
    let path = workspace_bin(bin).expect("workspace binary (cargo build --workspace --bins)");
    // No environment: clap prints a variable's value when it is set.
    let out = Command::new(&path)
        .arg("--help")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("COLUMNS", "1000")
        .output()
        .expect("run --help");
    assert!(out.status.success(), "{bin} --help failed");
    String::from_utf8(out.stdout).expect("utf-8 help")
}

#[test]
fn configuration_doc_lists_every_flag() {
    let path = doc_path();
    let mut doc = std::fs::read_to_string(&path).expect("docs/configuration.md");
    let bless = std::env::var_os("GRAFT_BLESS").is_some();
    let mut stale = Vec::new();
    for bin in DAEMONS {
        let opts = parse(&help_of(bin));
        assert!(!opts.is_empty(), "{bin} --help lists no option");
        let want = render(bin, &opts);
        let start = format!("<!-- flags: {bin} -->");
        let end = format!("<!-- end flags: {bin} -->");
        let (Some(a), Some(b)) = (doc.find(&start), doc.find(&end)) else {
            panic!("docs/configuration.md has no `{start}` ... `{end}` section");
        };
        let have = &doc[a..b + end.len()];
        if have != want {
            stale.push(bin);
            if bless {
                doc.replace_range(a..b + end.len(), &want);
            }
        }
    }
    if bless {
        std::fs::write(&path, &doc).expect("write docs/configuration.md");
    } else {
        assert!(
            stale.is_empty(),
            "docs/configuration.md's flags of {stale:?} differ from their --help; \
             rerun this test with GRAFT_BLESS=1 to rewrite them, and check the diff"
        );
    }
}

#[test]
fn help_pages_parse_as_clap_writes_them() {
    let help = "Options:\n      --log-format <F>\n          Log lines\n\n          Possible values:\n          - text: Human\n          - json: One object\n          \n          [env: GRAFT_LOG_FORMAT=]\n          [default: text]\n\n  -h, --help\n          Print help\n";
    let opts = parse(help);
    assert_eq!(
        opts,
        vec![Opt {
            flag: "--log-format <F>".into(),
            env: Some("GRAFT_LOG_FORMAT".into()),
            default: Some("text".into()),
            text: "Log lines".into(),
            values: vec!["text".into(), "json".into()],
        }]
    );
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces turned into `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// README and docs/ moved their sections between pages: every relative link must name a
/// file that exists and, with `#`, a heading in it.
#[test]
fn doc_links_resolve() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut pages = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let p = e.expect("docs entry").path();
        if p.extension().is_some_and(|x| x == "md") {
            pages.push(p);
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("page");
        let targets = text.split("](").skip(1).filter_map(|rest| {
            let end = rest.find(')')?;
            let t = &rest[..end];
            (!t.is_empty() && !t.contains(char::is_whitespace)).then_some(t)
        });
        for target in targets {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, frag) = target.split_once('#').unwrap_or((target, ""));
            let dest = if file.is_empty() {
                page.clone()
            } else {
                page.parent().expect("parent").join(file)
            };
            if !dest.exists() {
                broken.push(format!("{}: {target} (no such file)", page.display()));
                continue;
            }
            if frag.is_empty() || dest.is_dir() {
                continue;
            }
            let body = std::fs::read_to_string(&dest).unwrap_or_default();
            let found = body
                .lines()
                .filter_map(|l| l.strip_prefix('#'))
                .map(|l| anchor(l.trim_start_matches('#')))
                .any(|a| a == frag);
            if !found {
                broken.push(format!("{}: {target} (no such heading)", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
