//! Work on different devices and claims goes on in parallel; a slow setup (a GPU to be
//! freed for passthrough) delays only what shares its device or claim, and a retried call
//! picks up the work still running.

use super::*;
use graft_driver::claims::lifecycle::Stage;

const VFIO_0: &str = "0000:01:00.0";
const VFIO_1: &str = "0000:02:00.0";

#[test]
fn a_slow_setup_delays_no_claim_on_another_device() {
    let node = Node::new();
    let core = node.start();
    assert!(prepare(&core, vec![claim("old", &["tun"])])["old"].is_ok());
    node.setup.hold(VFIO_0);
    std::thread::scope(|s| {
        let slow = s.spawn(|| prepare(&core, vec![claim("a", &["vfio-0"])]));
        node.setup.wait_running(VFIO_0);

        let t = Instant::now();
        assert!(prepare(&core, vec![claim("b", &["fuse"])])["b"].is_ok());
        assert!(unprepare(&core, &["old"])["old"].is_ok());
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert!(!slow.is_finished(), "the slow setup is still running");
        assert_eq!(core.stage("a").unwrap(), Stage::Started);

        node.setup.release(VFIO_0);
        assert!(slow.join().unwrap()["a"].is_ok());
    });
    assert_eq!(core.stage("a").unwrap(), Stage::Completed);
}

#[test]
fn claims_on_different_devices_are_set_up_at_the_same_time() {
    let node = Node::new();
    let core = node.start();
    node.setup.hold(VFIO_0);
    node.setup.hold(VFIO_1);
    std::thread::scope(|s| {
        let call = s.spawn(|| {
            prepare(
                &core,
                vec![claim("a", &["vfio-0"]), claim("b", &["vfio-1"])],
            )
        });
        // Both are running before either is let go.
        node.setup.wait_running(VFIO_0);
        node.setup.wait_running(VFIO_1);
        node.setup.release(VFIO_0);
        node.setup.release(VFIO_1);
        let out = call.join().unwrap();
        assert!(out["a"].is_ok() && out["b"].is_ok(), "{out:?}");
    });
    assert_eq!(node.setup.kernel().most_at_once, 2);
}

#[test]
fn a_retried_prepare_waits_for_the_one_still_running_and_gets_its_result() {
    let node = Node::new();
    let core = node.start();
    node.setup.hold(VFIO_0);
    std::thread::scope(|s| {
        let first = s.spawn(|| prepare(&core, vec![claim("a", &["vfio-0"])]));
        node.setup.wait_running(VFIO_0);

        // A retry whose deadline passes first is told so, and changes nothing.
        let short = Instant::now() + Duration::from_millis(100);
        let out = core.prepare(vec![claim("a", &["vfio-0"])], short).unwrap();
        let e = claim_error(&out["a"]).to_string();
        assert!(
            e.contains("still running") && e.contains("ns/claim-a"),
            "{e}"
        );
        // An unprepare meanwhile waits just the same.
        let out = core.unprepare(&[id("a")], short).unwrap();
        assert!(matches!(
            claim_error(&out["a"]),
            ClaimError::InProgress { .. }
        ));

        // A retry with time to wait gets the first one's result.
        let retry = s.spawn(|| prepare(&core, vec![claim("a", &["vfio-0"])]));
        std::thread::sleep(Duration::from_millis(50));
        node.setup.release(VFIO_0);
        assert!(first.join().unwrap()["a"].is_ok());
        let out = retry.join().unwrap();
        assert_eq!(devices_of(&out, "a"), Ok(vec!["vfio-0".into()]));
    });
    assert_eq!(node.setup.kernel().applies, 1, "set up once");
}

#[test]
fn claims_sharing_a_device_are_set_up_one_after_the_other() {
    let node = Node::new();
    let core = node.start();
    node.setup.hold(VFIO_0);
    std::thread::scope(|s| {
        let first = s.spawn(|| prepare(&core, vec![shared("a")]));
        node.setup.wait_running(VFIO_0);
        let second = s.spawn(|| prepare(&core, vec![shared("b")]));
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(node.setup.kernel().running.get(VFIO_0), Some(&1));
        node.setup.release(VFIO_0);
        assert!(first.join().unwrap()["a"].is_ok());
        assert!(second.join().unwrap()["b"].is_ok());
    });
    let k = node.setup.kernel();
    assert_eq!((k.applies, k.most_on_one_device), (2, 1));
}

#[test]
fn a_device_busy_past_the_deadline_fails_only_that_claim() {
    let node = Node::new();
    let core = node.start();
    node.setup.hold(VFIO_0);
    std::thread::scope(|s| {
        let first = s.spawn(|| prepare(&core, vec![shared("a")]));
        node.setup.wait_running(VFIO_0);
        let short = Instant::now() + Duration::from_millis(100);
        let out = core
            .prepare(vec![shared("b"), claim("c", &["fuse"])], short)
            .unwrap();
        let e = claim_error(&out["b"]).to_string();
        assert!(e.contains("still being set up for another claim"), "{e}");
        assert!(out["c"].is_ok());
        assert_eq!(core.stage("b").unwrap(), Stage::Absent);
        node.setup.release(VFIO_0);
        assert!(first.join().unwrap()["a"].is_ok());
    });
    // b's retry goes through.
    assert!(prepare(&core, vec![shared("b")])["b"].is_ok());
}

#[test]
fn a_panicking_setup_fails_its_claim_as_a_panic_and_the_others_go_on() {
    let node = Node::new();
    let core = node.start();
    node.setup.kernel().panicking.insert(VFIO_0.into());
    let out = prepare(
        &core,
        vec![claim("a", &["vfio-0"]), claim("b", &["vfio-1"])],
    );
    let e = claim_error(&out["a"]);
    assert!(
        matches!(e, ClaimError::SetupPanicked { claim } if claim == "ns/claim-a"),
        "{e:?}"
    );
    assert!(e.to_string().contains("a device setup panicked"), "{e}");
    assert!(!e.to_string().contains("discovery"), "{e}");
    assert!(out["b"].is_ok(), "{out:?}");
    // Failed as a failed setup fails it; the other claim's setup is in force.
    assert_eq!(core.stage("a").unwrap(), Stage::Absent);
    assert_eq!(core.stage("b").unwrap(), Stage::Completed);
    assert_eq!(node.applied(), BTreeSet::from([VFIO_1.to_string()]));
}
