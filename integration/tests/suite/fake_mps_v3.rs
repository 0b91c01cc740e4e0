//! The fake MPS control daemon under MPS v3 (integration/fake-nvml/mps-v3.h; NVIDIA's MPS
//! guide from release 615 on): started with `-p 3` it runs a server per UID (`uid_<uid>`)
//! side by side, so a client of another UID is served while the first UID's client is still
//! connected; `server list` and `server set` name those servers and set their limits; the
//! legacy commands are refused; and a driver 580 control program refuses `-p 3`.
//!
//! Needs root (servers run as other UIDs; each process gets a /dev of its own), gcc and cc.

use std::time::{Duration, Instant};

use graft_integration::fake_gpu::build_fake_mps_control;
use graft_integration::fake_mps::attach;

use crate::fake_mps_clients::{passed, root, text, Bed, OTHER_UID};

/// A driver release whose MPS has v3.
pub(crate) const V3_DRIVER: &str = "620.10.01";

fn v3(bed: &Bed, args: &[&str]) -> std::process::Output {
    bed.mps(args).output().unwrap()
}

fn servers(bed: &Bed) -> String {
    let out = v3(bed, &["server", "list", "--format=csv,noheader"]);
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn v3_serves_two_uids_at_once() {
    if !root() {
        return;
    }
    let bed = Bed::start(0o1777, Some(V3_DRIVER), &["-f", "-p", "3"]);
    assert!(bed.control_log().contains("] Protocol 3\n"));

    // Root's client stays connected; a client of another UID is served meanwhile.
    let held = attach(&bed.pipe).unwrap();
    let start = Instant::now();
    let out = bed.probe(OTHER_UID, &[]).output().unwrap();
    assert!(passed(&out), "{}", text(&out));
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "the other UID's client waited {:?}",
        start.elapsed()
    );
    let list = servers(&bed);
    for uid in [0, OTHER_UID] {
        assert!(
            list.lines()
                .any(|l| l.starts_with(&format!("uid_{uid},{uid},")) && l.contains(",Ready,")),
            "uid_{uid} not listed:\n{list}"
        );
    }
    assert!(
        !bed.control_log().contains("queued"),
        "{}",
        bed.control_log()
    );

    // Limits per server, for its later clients.
    let out = v3(
        &bed,
        &[
            "server",
            "set",
            &format!("uid_{OTHER_UID}"),
            "--active-thread-percentage=30",
            "--pinned-memory-limit=1G",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = bed.probe(OTHER_UID, &[]).output().unwrap();
    assert!(passed(&out), "{}", text(&out));
    let log = bed.server_log();
    let want = format!(
        "uid {OTHER_UID} active_thread_percentage 30 pinned_mem_limit 0=1024M (server 30 0=1024M"
    );
    assert!(log.contains(&want), "{want:?} not in\n{log}");
    let out = v3(&bed, &["server", "get", "uid_0", "status"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Ready\n");

    // What the fake refuses: an unknown server, a bad value, the legacy commands.
    for args in [
        &["server", "set", "uid_4242", "--active-thread-percentage=30"][..],
        &["server", "set", "uid_0", "--active-thread-percentage=0"],
        &["server", "set", "uid_0"],
        &["namespace", "list"],
    ] {
        let out = v3(&bed, args);
        assert!(!out.status.success(), "{args:?}: {}", text(&out));
        assert!(text(&out).contains("Error"), "{args:?}: {}", text(&out));
    }
    assert!(bed.control("get_server_list\n").starts_with("Error"));
    drop(held);
}

#[test]
fn a_driver_580_control_program_refuses_protocol_3() {
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("nvidia-cuda-mps-control");
    build_fake_mps_control(&control).unwrap();
    for args in [&["-f", "-p", "3"][..], &["server", "list"], &["-q"]] {
        let out = std::process::Command::new(&control)
            .args(args)
            .env_clear()
            .env("CUDA_MPS_PIPE_DIRECTORY", dir.path().join("pipe"))
            .env("CUDA_MPS_LOG_DIRECTORY", dir.path().join("log"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        assert!(text(&out).contains("Usage"), "{args:?}: {}", text(&out));
    }
}
