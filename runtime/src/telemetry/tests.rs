use std::sync::atomic::{AtomicBool, Ordering};

use hyper::{Method, StatusCode};
use prometheus_client::metrics::counter::Counter;

use super::*;

fn flag_check(flag: &Arc<AtomicBool>, yes: &'static str, no: &'static str) -> ReadyCheck {
    let flag = Arc::clone(flag);
    Arc::new(move || match flag.load(Ordering::SeqCst) {
        true => Ok(yes.to_string()),
        false => Err(NotReady(no.to_string())),
    })
}

#[tokio::test]
async fn readiness_reflects_every_check_in_order() {
    let (a, b) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let mut t = Telemetry::new("graft_test_build_info");
    let things = Counter::<u64>::default();
    things.inc();
    t.registry().register("graft_test_things", "Things", things);
    let ep = t
        .ready_when(flag_check(&a, "registered", "not ready: not registered"))
        .ready_when(flag_check(&b, "", "not ready: nothing published"))
        .endpoints();
    let ready = || ep.answer(&Method::GET, "/readyz");

    let (code, _, body) = ready().await;
    assert_eq!(
        (code, body.as_str()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: not registered\n"
        )
    );
    a.store(true, Ordering::SeqCst);
    let (code, _, body) = ready().await;
    assert_eq!(
        (code, body.as_str()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: nothing published\n"
        )
    );
    b.store(true, Ordering::SeqCst);
    // Ready: the reasons that say something.
    let (code, _, body) = ready().await;
    assert_eq!((code, body.as_str()), (StatusCode::OK, "registered\n"));
    a.store(false, Ordering::SeqCst);
    assert_eq!(ready().await.0, StatusCode::SERVICE_UNAVAILABLE);

    let (code, _, metrics) = ep.answer(&Method::GET, "/metrics").await;
    assert_eq!(code, StatusCode::OK);
    for want in [
        "graft_test_things_total 1",
        "graft_test_build_info{version=",
        "process_resident_memory_bytes",
    ] {
        assert!(metrics.contains(want), "{want} in {metrics}");
    }
}

#[tokio::test]
async fn without_checks_a_daemon_is_ready() {
    let ep = Telemetry::new("graft_test_build_info").endpoints();
    let (code, _, body) = ep.answer(&Method::GET, "/readyz").await;
    assert_eq!((code, body.as_str()), (StatusCode::OK, "ok\n"));
    let check = all(vec![
        Arc::new(|| Ok("a".into())),
        Arc::new(|| Ok("b".into())),
    ]);
    assert_eq!(check().unwrap(), "a; b");
}

#[tokio::test]
async fn the_probe_socket_serves_the_checks() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/probe.sock");
    let ready = Arc::new(AtomicBool::new(false));
    Telemetry::new("graft_test_build_info")
        .ready_when(flag_check(&ready, "ready: fine", "not ready: waiting"))
        .serve(None, Some(&socket));
    let ask = |path: &'static str| {
        let socket = socket.clone();
        tokio::task::spawn_blocking(move || {
            graft_telemetry::probe::get(&socket, path, std::time::Duration::from_secs(3))
        })
    };
    let (code, body) = ask("/readyz").await.unwrap().unwrap();
    assert_eq!((code, body.as_str()), (503, "not ready: waiting\n"));
    ready.store(true, Ordering::SeqCst);
    let (code, body) = ask("/readyz").await.unwrap().unwrap();
    assert_eq!((code, body.as_str()), (200, "ready: fine\n"));
    assert_eq!(ask("/healthz").await.unwrap().unwrap().0, 200);
}
