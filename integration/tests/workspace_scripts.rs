//! The testbed's scripts where a slip fails CI after it has run every test, or makes every
//! run slower:
//! - the summary at the end of test-all.sh (integration/testbed/summary.sh) must exit 0 and
//!   count right when no test failed, when some did, and when a retry passed. Once a
//!   `grep -c` counting no flaky test exited 1 under `set -e`, and a run whose every test
//!   passed failed;
//! - the scripts that build and that the suite runs (the static graft-hook on every cluster
//!   deploy, the release in install_as_documented) must run cargo without the suite's
//!   `RUSTC_BOOTSTRAP=1`: cargo keeps it in its fingerprints, so a build under it rebuilt
//!   the shared build scripts and proc-macros, and every later build of the run compiled
//!   most dependencies again.

use std::path::Path;
use std::process::Command;

fn summary(log: &str, retried: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (log_path, retried_path) = (dir.path().join("log"), dir.path().join("retried"));
    std::fs::write(&log_path, log).unwrap();
    std::fs::write(&retried_path, retried).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("testbed/summary.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(&log_path)
        .arg(&retried_path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "summary.sh exited {:?}: {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

const LOG: &str = "\
test a::fast ... ok <3.5s>
test a::slow ... ok <10.0s>
test result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 9 filtered out; finished in 13.5s
test b::flaky ... FAILED <1.0s>
test result: FAILED. 5 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 2.0s
";

#[test]
fn the_summary_exits_0_when_no_test_failed() {
    let clean = "test a::x ... ok <1.0s>\ntest result: ok. 1 passed; 0 failed; 0 ignored\n";
    let out = summary(clean, "");
    assert!(
        out.contains("graft: 1 passed, 0 failed (0 of those passed when run again alone)"),
        "{out}"
    );
    assert!(out.contains("the retry report: no test failed"), "{out}");
}

#[test]
fn the_summary_counts_every_tier_and_reports_each_retry() {
    let retried = "b::flaky: failed, then passed when run again alone\nc::broken: failed twice\n";
    let out = summary(LOG, retried);
    assert!(
        out.contains("graft: 7 passed, 1 failed (1 of those passed when run again alone)"),
        "{out}"
    );
    let slowest: Vec<&str> = out.lines().skip(1).take(2).map(str::trim).collect();
    assert_eq!(slowest, ["10.0 s  a::slow", "3.5 s  a::fast"], "{out}");
    assert!(out.contains("  c::broken: failed twice"), "{out}");
}

/// Runs `script` with `args` under `RUSTC_BOOTSTRAP=1`, a `cargo` on PATH that records the
/// variable as it sees it, and the release cache in a temporary directory; returns what each
/// cargo call saw. The script may fail after its cargo calls (no binaries were built).
fn cargo_env_of(script: &str, args: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let record = dir.path().join("record");
    let cargo = bin.join("cargo");
    std::fs::write(
        &cargo,
        "#!/bin/sh\nprintf '%s\\n' \"${RUSTC_BOOTSTRAP-unset}\" >>\"$RECORD\"\n\
         [ \"$1\" = metadata ] && echo '{\"target_directory\":\"/nonexistent\"}'\nexit 0\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let _ = Command::new("bash")
        .arg(top.join(script))
        .args(args)
        .env("PATH", path)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("RECORD", &record)
        .env(
            "GRAFT_RELEASE_TARGET_DIR",
            dir.path().join("release-target"),
        )
        .output()
        .unwrap();
    std::fs::read_to_string(&record)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn scripts_the_suite_runs_build_without_rustc_bootstrap() {
    let host = String::from_utf8(Command::new("rustc").arg("-vV").output().unwrap().stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .unwrap();
    let out = tempfile::tempdir().unwrap();
    let out = out.path().to_str().unwrap();
    for (script, args) in [
        ("hooks/build-static.sh", vec![]),
        ("deploy/release/build.sh", vec![out, host.as_str()]),
    ] {
        let seen = cargo_env_of(script, &args);
        assert!(!seen.is_empty(), "{script} ran no cargo");
        assert!(
            seen.iter().all(|v| v == "unset"),
            "{script} ran cargo with RUSTC_BOOTSTRAP set ({seen:?})"
        );
    }
}
