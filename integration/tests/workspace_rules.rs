//! Rules of the codebase that no compiler lint checks, enforced over every workspace crate's
//! sources (plain text scans: no testbed, nothing built).
//!
//! - Libraries use `thiserror` types, not `Result<_, String>` or `type Err = String`: an
//!   error must name what was wrong, and callers must be able to tell cases apart. Binary
//!   entry points (`src/main.rs`, `src/bin/`, a `[[bin]]`'s `path`) and tests are exempt.
//! - Tokio tasks (`tokio::spawn`, `tokio::task::spawn`, `spawn_blocking`) are started only
//!   in the files of `SPAWN_OWNERS`, each with what notices the task's end, so that a new
//!   task elsewhere is a decision someone reviews. Test code is exempt; `JoinSet::spawn`
//!   and graft-runtime's `Daemon::spawn` own their tasks by construction and are not counted.
//! - One convention for tests kept out of a module's file: they are its child module,
//!   `#[cfg(test)] mod tests;` in `m/tests.rs` (a second one `mod <topic>_tests;` beside it),
//!   found where Rust looks for a child: never through `#[path]`, so that a module's tests
//!   are always in its own directory.

mod support;

use std::fs;
use std::path::{Path, PathBuf};

use support::module_graph;
use support::source::{
    bin_paths, members, rust_files, tokens, without_test_modules, workspace_root, Token,
};

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
fn out_of_line_tests_follow_one_convention() {
    let root = workspace_root();
    let manifest = fs::read_to_string(root.join("Cargo.toml")).expect("the root Cargo.toml");
    let mut offences = Vec::new();
    let mut scanned = 0;
    for member in members(&manifest) {
        let src = root.join(&member).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files).unwrap_or_else(|e| panic!("{member}/src: {e}"));
        for file in files {
            let text = fs::read_to_string(&file).unwrap_or_else(|e| panic!("{member}: {e}"));
            scanned += 1;
            let shown = Path::new(&member)
                .join("src")
                .join(file.strip_prefix(&src).unwrap_or(&file));
            for (i, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("#[path") {
                    offences.push(format!("{}:{}: {}", shown.display(), i + 1, line.trim()));
                }
            }
        }
    }
    assert!(scanned > 0, "no sources found");
    assert!(
        offences.is_empty(),
        "a module's out-of-line tests are its child `mod tests;` in its own directory \
         (m/tests.rs), not a #[path] sibling:\n{}",
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

/// The lines of `src` (test modules left out) that start a tokio task: `tokio::spawn`,
/// `task::spawn` (also in a `task::{..}` import) and `spawn_blocking` in any form.
fn spawns(src: &str) -> Vec<usize> {
    let ts = tokens(&without_test_modules(src));
    let text = |k: usize| ts.get(k).map_or("", |t| t.text.as_str());
    let mut lines = Vec::new();
    for (k, t) in ts.iter().enumerate() {
        let path_to = |head: &str| t.text == head && text(k + 1) == ":" && text(k + 2) == ":";
        let hit = if t.text == "spawn_blocking" {
            true
        } else if path_to("tokio") {
            text(k + 3) == "spawn"
        } else if path_to("task") && text(k + 3) == "{" {
            let close = (k + 3..ts.len())
                .find(|&j| text(j) == "}")
                .unwrap_or(ts.len());
            (k + 4..close).any(|j| text(j) == "spawn")
        } else {
            path_to("task") && text(k + 3) == "spawn"
        };
        if hit && lines.last() != Some(&t.line) {
            lines.push(t.line);
        }
    }
    lines
}

/// Every file of the workspace's crates that is not test-only (relative to the root), with
/// its text.
fn product_files() -> Vec<(String, String)> {
    let root = workspace_root();
    let manifest = fs::read_to_string(root.join("Cargo.toml")).expect("the root Cargo.toml");
    let mut out: Vec<(String, String)> = Vec::new();
    for member in members(&manifest) {
        for krate in module_graph::roots(&root.join(&member)) {
            for file in module_graph::modules(&krate).into_values() {
                let rel = file.strip_prefix(&root).unwrap_or(&file);
                let rel = rel.display().to_string();
                if out.iter().all(|(f, _)| *f != rel) {
                    let text = fs::read_to_string(&file).unwrap_or_else(|e| panic!("{rel}: {e}"));
                    out.push((rel, text));
                }
            }
        }
    }
    out.sort();
    out
}

/// The files that may start tokio tasks, each with what notices the task's end: the
/// rule is that every task has an owner that does. "awaited" is a blocking section that the
/// spawning function awaits (so its caller sees the result, or the panic as an error);
/// "detached" marks a task nothing awaits, which the rule would rather see owned.
const SPAWN_OWNERS: &[(&str, &str)] = &[
    ("driver-core/src/edge/call.rs", "awaited under the call's deadline; a prepare that outlasts it is handed to a task that awaits it and keeps its result for the retry (`late`)"),
    ("driver-core/src/events/health.rs", "awaited: reading the records of the devices whose health changed"),
    ("driver-core/src/events/nri.rs", "awaited: reading graft-nri's status file"),
    ("driver-core/src/events/post.rs", "detached: `Poster::spawn`, which nothing calls (graft-driver's assembly runs `with_task`'s task under the Daemon)"),
    ("driver-core/src/events/refusals.rs", "awaited: draining graft-nri's refusal journal"),
    ("driver-core/src/metrics/mod.rs", "awaited: counting claims and records for the gauges"),
    ("driver-core/src/metrics/usage.rs", "awaited: joining a usage round with the claim records"),
    ("driver-core/src/plugin/mod.rs", "the DRA and registration servers: `serve` holds both and awaits them at shutdown"),
    ("driver-core/src/plugin/resource_health.rs", "detached: one producer per health stream; it ends when the client goes or on stop"),
    ("driver-core/src/publisher.rs", "detached: the slice watch that wakes `run`; it stops once `run` drops its receiver"),
    ("driver-core/src/snapshot.rs", "awaited: writing the device snapshot"),
    ("driver/src/cleanup.rs", "awaited: the state disk's write-back check (blocking fdatasyncs)"),
    ("driver/src/rescan.rs", "awaited: the rescan's discovery and the absent-device list"),
    ("families/nvidia/src/backend.rs", "awaited: restoring the MPS shares at startup"),
    ("families/nvidia/src/setup/mps_tenants.rs", "awaited: reading the MPS tenants from the share markers"),
    ("families/nvidia/src/usage.rs", "awaited: one round of NVML reads for the usage metrics"),
    ("integration/src/fleet/kubelet.rs", "the fake kubelet: `Kubelet` holds the handle and aborts it when dropped; its writes are a JoinSet it reaps"),
    ("integration/src/fleet/workload.rs", "a round's pod watch: aborted when the round has counted its pods"),
    ("integration/src/pod_clock.rs", "the pod watch: `PodClock` holds the handle and aborts it when dropped"),
    ("nri-plugin/src/entries.rs", "detached: the batched write of graftctl's container entries; a failure is logged"),
    ("nri-plugin/src/main.rs", "awaited: taking the status lock"),
    ("nri-plugin/src/plugin/leftovers.rs", "detached: removing a gone container's leftovers; a failure is logged"),
    ("nri-plugin/src/plugin/sync.rs", "awaited inside a `spawn_logged` task: the Synchronize verification's record reads"),
    ("nri-plugin/src/reads.rs", "awaited under CreateContainer's read limit; an overdue read is counted"),
    ("nri-plugin/src/refusal.rs", "detached: appending to the refusal journal; a failure is logged"),
    ("nri-sdk/src/dispatcher/sync.rs", "awaited inside a `spawn_logged` task: decoding a Synchronize already answered"),
    ("nri-sdk/src/guard.rs", "`spawn_logged`: catches and logs the task's panic, and returns its handle"),
    ("nri-sdk/src/mux/mod.rs", "the trunk's reader and writer: each reports its end through `EndsTrunk`"),
    ("scheduler-extender/src/listen.rs", "one task per connection, holding its slot of `MAX_OPEN`"),
    ("scheduler-extender/src/server.rs", "awaited: scoring, with its panic turned into an error answer"),
    ("telemetry/src/http.rs", "the readiness check: its verdict and its end go out through a watch channel"),
    ("telemetry/src/listen.rs", "the endpoints' listeners (the TCP one reports through `Serving`) and one task per connection, holding a slot"),
];

#[test]
fn tasks_are_spawned_by_owners() {
    let mut unlisted = Vec::new();
    let mut spawning = Vec::new();
    for (file, text) in product_files() {
        let lines = spawns(&text);
        if lines.is_empty() {
            continue;
        }
        if SPAWN_OWNERS.iter().all(|(f, _)| *f != file) {
            unlisted.push(format!("{file}: lines {lines:?}"));
        }
        spawning.push(file);
    }
    assert!(
        unlisted.is_empty(),
        "tokio tasks started outside the files that own tasks (give the task an owner that \
         notices its end, such as graft-runtime's Daemon or a held JoinHandle, or add the file \
         to SPAWN_OWNERS with what owns its tasks):\n{}",
        unlisted.join("\n")
    );
    let stale: Vec<&str> = SPAWN_OWNERS
        .iter()
        .map(|(f, _)| *f)
        .filter(|f| !spawning.iter().any(|s| s == f))
        .collect();
    assert!(
        stale.is_empty(),
        "SPAWN_OWNERS lists files that start no task now (take them out): {stale:?}"
    );
}

#[test]
fn the_scan_finds_spawns_outside_tests() {
    let src = r#"
use tokio::task::spawn_blocking;
fn a() { tokio::spawn(async {}); }
fn b() { tokio::task::spawn(async {}); }
fn c() { let h = spawn_blocking(|| 1); }
use tokio::task::{self, spawn};
fn fine() {
    let s = "tokio::spawn";
    // tokio::spawn(x)
    tasks.spawn(async {});
    std::thread::spawn(|| {});
}

#[cfg(test)]
mod tests {
    fn t() { tokio::spawn(async {}); }
}
"#;
    assert_eq!(spawns(src), [2, 3, 4, 5, 6]);
}
