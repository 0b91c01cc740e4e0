//! Synchronize answers before it reads any record (containerd creates no container until
//! the answer is in); the check of the running containers follows the answer, evicts one
//! that runs without its devices, and counts the Synchronize as verified in the status file.

use std::time::{Duration, Instant};

use graft_nri::plugin::GraftPlugin;
use graft_nri_sdk::{NriPlugin, Runtime};
use graft_proto::nri;
use graft_record::{read_status, StatusPublisher};

mod support;

const POD: &str = "5e0c9a8b-1d2f-4e3a-8b7c-6d5e4f3a2b10";

/// Container `app` of pod POD, running, created while graft-nri was away: its spec lacks the
/// `fuse` and `tun` its pod's record gives it.
fn running_without_devices() -> (nri::PodSandbox, nri::Container) {
    let pod = nri::PodSandbox {
        id: "sandbox-a".into(),
        uid: POD.into(),
        name: "p".into(),
        namespace: "t".into(),
        ..Default::default()
    };
    let ctr = nri::Container {
        id: "ctr-a".into(),
        pod_sandbox_id: "sandbox-a".into(),
        name: "app".into(),
        state: nri::ContainerState::CONTAINER_RUNNING.into(),
        ..Default::default()
    };
    (pod, ctr)
}

#[test]
fn synchronize_answers_first_and_verifies_after() {
    let dir = tempfile::tempdir().unwrap();
    let (store, policy, c) = support::fixture(dir.path(), POD);
    store.put_claim(&c).unwrap();
    let status = StatusPublisher::acquire(dir.path(), "10-graft", "boot".into()).unwrap();
    let plugin = GraftPlugin::new(store, status, policy);
    let (pod, ctr) = running_without_devices();
    // One thread: the check is a task that cannot start before the test yields, so the
    // status read right after the answer shows what the answer itself did.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = || read_status(dir.path()).unwrap().unwrap();
    rt.block_on(async {
        let runtime = Runtime::unconnected().unwrap();
        let updates = plugin
            .synchronize(runtime, vec![pod], vec![ctr])
            .await
            .unwrap();
        assert!(updates.is_empty());
        let answered = status();
        assert_eq!((answered.verified_syncs, answered.uninjected_found), (0, 0));
        let start = Instant::now();
        while status().verified_syncs == 0 {
            assert!(start.elapsed() < Duration::from_secs(10), "never verified");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(status().uninjected_found, 1, "{:?}", status());
    });
}
