//! MPS v3 end to end without a cluster: graft-mps run with `--mps-protocol 3` on a fake node
//! whose MPS programs are those of a v3 driver (the rest of the node stays driver 580:
//! graft-mps does not read the version). Two UIDs of one namespace are served at the same
//! time, each by its own server, and graft-mps sets the namespace's limits on each server as
//! it appears. On a driver without v3 the daemon does not start, and prepare says why.
//!
//! Needs what `mps` needs: root, gcc, cc and the workspace binaries.

use std::time::{Duration, Instant};

use graft_driver::claims::setup_port::DeviceSetup;
use graft_driver::mps::{self, Phase};
use graft_integration::fake_gpu::FakeNode;
use graft_integration::fake_mps::attach;

use crate::fake_mps_v3::V3_DRIVER;
use crate::mps::{env, root, wait_for, Bed, GraftMps, Unmount};

#[test]
fn two_uids_of_one_namespace_run_side_by_side_under_v3() {
    if !root() {
        return;
    }
    let bed = Bed::new();
    bed.node.install_mps_of(V3_DRIVER).unwrap();
    let _unmount = Unmount(bed.dir.path().to_path_buf());
    let log = bed.dir.path().join("graft-mps.log");
    let _graft_mps = GraftMps::start_with(&bed.state, &bed.node, &log, &["--mps-protocol", "3"]);
    let s = bed.setup();
    let (a1, a2) = bed.two_shares_of_a();
    let e1 = s.apply(&a1).unwrap().unwrap();
    let e2 = s.apply(&a2).unwrap().unwrap();
    assert_eq!(
        env(&e2, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE").as_deref(),
        Some("60")
    );
    let control = || FakeNode::mps_log(&bed.log_dir(1));
    assert!(control().contains("] Protocol 3\n"), "{}", control());

    // Root's client holds its server; a client of UID 1000 runs meanwhile, on its own.
    let probe = bed.probe(0, &e1, true);
    assert!(probe.contains("PROBE PASS"), "{probe}");
    let held = attach(&bed.paths().tenancy(1).pipe()).unwrap();
    let start = Instant::now();
    let probe = bed.probe(1000, &e2, true);
    let took = start.elapsed();
    assert!(probe.contains("PROBE PASS"), "{probe}");
    assert!(took < Duration::from_secs(5), "UID 1000 waited {took:?}");
    assert!(!control().contains("queued"), "{}", control());
    println!("a second UID's client beside the first's: {took:?}");

    // graft-mps gives each server the namespace's limits (100 and 40+30 GiB) as it
    // appears; a client that drops its own env gets those, never the whole GPU.
    for uid in [0, 1000] {
        let want =
            format!("Command server set uid_{uid} --active-thread-percentage=100 --pinned-memory-limit=71680M\n");
        wait_for(&format!("{want:?} in the control log"), || {
            control().contains(&want)
        });
    }
    let probe = bed.probe(1000, &e2, false);
    assert!(probe.contains("PROBE PASS"), "{probe}");
    let servers = FakeNode::mps_server_log(&bed.log_dir(1));
    for want in [
        "uid 1000 active_thread_percentage 60 pinned_mem_limit 0=40960M",
        "uid 1000 active_thread_percentage 100 pinned_mem_limit 0=71680M (server 100 0=71680M; client asked - -)",
    ] {
        assert!(servers.contains(want), "{want:?} not in\n{servers}");
    }
    drop(held);
    let status = mps::read_status(&bed.paths()).unwrap();
    assert_eq!(status.phase, Phase::Ready, "{status:?}");
}

#[test]
fn protocol_3_on_a_driver_without_it_fails_the_prepare_saying_why() {
    if !root() {
        return;
    }
    let bed = Bed::new();
    let _unmount = Unmount(bed.dir.path().to_path_buf());
    let log = bed.dir.path().join("graft-mps.log");
    let _graft_mps = GraftMps::start_with(&bed.state, &bed.node, &log, &["--mps-protocol", "3"]);
    let s = bed.setup_waiting(Duration::from_secs(5));
    let (a1, _) = bed.two_shares_of_a();
    let err = s.apply(&a1).unwrap_err().to_string();
    assert!(
        err.contains("exited as it started") && err.contains("driver 615"),
        "{err}"
    );
}
