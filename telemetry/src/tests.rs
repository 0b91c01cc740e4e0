use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

use crate::probe::{self, ProbeKind};
use crate::*;

fn endpoints(ready: Arc<AtomicBool>) -> Endpoints {
    let mut reg = Registry::default();
    register_build_info(&mut reg, "graft_test_build_info");
    register_process(&mut reg);
    let c = Counter::<u64>::default();
    c.inc();
    reg.register("graft_test_things", "Things", c);
    Endpoints::new(
        reg,
        Arc::new(move || {
            if ready.load(Ordering::Relaxed) {
                Ok("ready: all good".into())
            } else {
                Err("not ready: waiting\nfor a thing".into())
            }
        }),
    )
}

fn socket_server(dir: &std::path::Path, ready: Arc<AtomicBool>) -> std::path::PathBuf {
    let path = dir.join("sub/probe.sock");
    serve(
        endpoints(ready),
        ServeConfig {
            tcp: None,
            unix: Some(path.clone()),
            retry: Duration::from_millis(50),
        },
    )
    .unwrap();
    path
}

async fn get(path: &std::path::Path, what: &str) -> Result<(u16, String), probe::ProbeError> {
    let (path, what) = (path.to_path_buf(), what.to_string());
    tokio::task::spawn_blocking(move || probe::get(&path, &what, Duration::from_secs(5)))
        .await
        .unwrap()
}

/// Sends raw bytes and returns whatever comes back before the server closes or goes quiet.
async fn raw(path: &std::path::Path, bytes: Vec<u8>) -> String {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut s = std::os::unix::net::UnixStream::connect(&path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(&bytes);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
    .unwrap()
}

#[test]
fn encoding_names_the_metrics() {
    let text = endpoints(Arc::new(AtomicBool::new(true))).encode().unwrap();
    assert!(
        text.contains(&format!("graft_test_build_info{{version=\"{VERSION}\"}} 1")),
        "{text}"
    );
    assert!(text.contains("graft_test_things_total 1"), "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");
    // This process's own figures, as every Prometheus client names them.
    for name in [
        "process_resident_memory_bytes ",
        "process_cpu_seconds_total ",
        "process_open_fds ",
        "process_start_time_seconds ",
    ] {
        assert!(text.contains(name), "{name} missing from {text}");
    }
    let f = process_figures().unwrap();
    assert!(
        f.resident_bytes > 1 << 20 && f.open_fds > 2 && f.max_fds >= f.open_fds,
        "{f:?}"
    );
}

#[tokio::test]
async fn answers_metrics_health_ready_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let ready = Arc::new(AtomicBool::new(false));
    let sock = socket_server(dir.path(), ready.clone());
    let mode = std::fs::metadata(&sock).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );

    let (code, body) = get(&sock, "/metrics").await.unwrap();
    assert_eq!(code, 200);
    assert!(body.contains("graft_test_things_total 1"), "{body}");
    assert_eq!(get(&sock, "/healthz").await.unwrap(), (200, "ok\n".into()));
    let (code, body) = get(&sock, "/readyz").await.unwrap();
    assert_eq!(code, 503);
    // One line, whatever the check said.
    assert_eq!(body, "not ready: waiting for a thing\n");
    ready.store(true, Ordering::Relaxed);
    assert_eq!(
        get(&sock, "/readyz").await.unwrap(),
        (200, "ready: all good\n".into())
    );
    assert_eq!(get(&sock, "/nope").await.unwrap().0, 404);
    assert_eq!(get(&sock, "/metrics/../readyz").await.unwrap().0, 404);
    let post = raw(
        &sock,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            .to_vec(),
    )
    .await;
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
}

#[tokio::test]
async fn garbage_and_oversized_requests_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let sock = socket_server(dir.path(), Arc::new(AtomicBool::new(true)));
    let garbage = raw(&sock, b"\x00\x01\x02 what is this\r\n\r\n".to_vec()).await;
    assert!(
        garbage.is_empty() || garbage.starts_with("HTTP/1.1 400"),
        "{garbage}"
    );
    let mut big = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 64 * 1024));
    big.extend(b"\r\n\r\n");
    let answer = raw(&sock, big).await;
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );
    assert!(!answer.contains("graft_test"), "{answer}");
    // Still serving afterwards.
    assert_eq!(get(&sock, "/healthz").await.unwrap().0, 200);
}

#[tokio::test]
async fn a_stale_socket_is_replaced_and_other_files_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let ep = endpoints(Arc::new(AtomicBool::new(true)));
    let cfg = |p: &std::path::Path| ServeConfig {
        tcp: None,
        unix: Some(p.to_path_buf()),
        retry: Duration::from_millis(50),
    };
    serve(ep.clone(), cfg(&path)).unwrap();
    assert_eq!(get(&path, "/healthz").await.unwrap().0, 200);
    // A live one is another instance's.
    let e = serve(ep.clone(), cfg(&path)).err().unwrap().to_string();
    assert!(e.contains("another running instance"), "{e}");
    assert_eq!(get(&path, "/healthz").await.unwrap().0, 200);
    let file = dir.path().join("plain");
    std::fs::write(&file, "keep").unwrap();
    let e = serve(ep, cfg(&file)).err().unwrap().to_string();
    assert!(e.contains("not a socket"), "{e}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
}

#[tokio::test]
async fn tcp_binds_once_the_port_is_free() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap();
    let serving = serve(
        endpoints(Arc::new(AtomicBool::new(true))),
        ServeConfig {
            tcp: Some(addr),
            unix: None,
            retry: Duration::from_millis(50),
        },
    )
    .unwrap();
    let mut bound = serving.tcp.clone();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(*bound.borrow(), None, "bound while the port was held");
    drop(held);
    let got = tokio::time::timeout(Duration::from_secs(10), bound.wait_for(|a| a.is_some()))
        .await
        .expect("never bound")
        .unwrap()
        .unwrap();
    assert_eq!(got, addr);
    let body = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    })
    .await
    .unwrap();
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.contains("application/openmetrics-text"), "{body}");
    assert!(body.contains("graft_test_things_total 1"), "{body}");
}

#[tokio::test]
async fn probe_exit_status_follows_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let ready = Arc::new(AtomicBool::new(false));
    let sock = socket_server(dir.path(), ready.clone());
    let run = |kind, sock: std::path::PathBuf| {
        tokio::task::spawn_blocking(move || probe::run(kind, &sock))
    };
    assert_eq!(run(ProbeKind::Live, sock.clone()).await.unwrap(), 0);
    assert_eq!(run(ProbeKind::Ready, sock.clone()).await.unwrap(), 1);
    ready.store(true, Ordering::Relaxed);
    assert_eq!(run(ProbeKind::Ready, sock.clone()).await.unwrap(), 0);
    let missing = dir.path().join("missing.sock");
    assert_eq!(run(ProbeKind::Live, missing).await.unwrap(), 1);
    // Through the command line, as the exec probe runs it.
    let args: Vec<String> = ["graft-x", "--probe", "ready", "--health-socket"]
        .iter()
        .map(|s| s.to_string())
        .chain([sock.display().to_string()])
        .collect();
    let code = tokio::task::spawn_blocking(move || probe::requested(&args, "/nonexistent"))
        .await
        .unwrap();
    assert!(matches!(code, Some(Ok(0))), "{code:?}");
}

#[test]
fn probe_arguments() {
    let a = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(probe::requested(&a(&["x", "--node-name", "n"]), "/d").is_none());
    assert!(probe::requested(&a(&["x", "--probe=sideways"]), "/d")
        .unwrap()
        .is_err());
    let code = probe::requested(
        &a(&["x", "--probe=live", "--health-socket=/nonexistent/s"]),
        "/d",
    );
    assert!(matches!(code, Some(Ok(1))), "{code:?}");
}

#[test]
fn addresses() {
    assert_eq!(parse_addr("").unwrap(), None);
    assert_eq!(parse_addr("off").unwrap(), None);
    assert_eq!(
        parse_addr(":9477").unwrap(),
        Some("0.0.0.0:9477".parse().unwrap())
    );
    assert_eq!(
        parse_addr("127.0.0.1:0").unwrap(),
        Some("127.0.0.1:0".parse().unwrap())
    );
    assert_eq!(
        parse_addr("[::1]:9").unwrap(),
        Some("[::1]:9".parse().unwrap())
    );
    // $(POD_IP):PORT on an IPv6 node.
    assert_eq!(
        parse_addr("fd00::1:9477").unwrap(),
        Some("[fd00::1]:9477".parse().unwrap())
    );
    assert!(parse_addr("fd00::1").is_err());
    assert!(parse_addr("$(POD_IP):9477").is_err());
    assert!(parse_addr("localhost:9477").is_err());
    assert!(parse_addr("9477").is_err());
}

/// A readiness check that hangs holds one blocking thread however many probes and scrapers
/// ask meanwhile (each answered "not answered" on time), and the first request after it
/// ends runs a fresh one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_readiness_check_runs_once_for_all_requests() {
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (release, hold) = std::sync::mpsc::channel::<()>();
    let hold = std::sync::Mutex::new(hold);
    let counted = calls.clone();
    let ep = Endpoints::new(
        Registry::default(),
        Arc::new(move || {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                let _ = hold.lock().unwrap().recv();
            }
            Ok("ready".into())
        }),
    );
    let asks: Vec<_> = (0..50)
        .map(|_| {
            let ep = ep.clone();
            tokio::spawn(async move { ep.answer(&hyper::Method::GET, "/readyz").await })
        })
        .collect();
    for a in asks {
        let (code, _, body) = a.await.unwrap();
        assert_eq!(code, hyper::StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("not answered"), "{body}");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1, "one check for 50 requests");
    release.send(()).unwrap();
    // A request right after the release may still join the first check as it ends; once
    // one is answered "ready", no check is in flight and the next request runs a fresh one.
    for _ in 0..100 {
        let (code, _, body) = ep.answer(&hyper::Method::GET, "/readyz").await;
        if code == hyper::StatusCode::OK {
            assert_eq!(body, "ready\n");
            let before = calls.load(Ordering::SeqCst);
            assert!((1..=2).contains(&before), "{before} checks");
            let (code, _, _) = ep.answer(&hyper::Method::GET, "/readyz").await;
            assert_eq!(code, hyper::StatusCode::OK);
            assert_eq!(calls.load(Ordering::SeqCst), before + 1, "a fresh check");
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no fresh check after the hung one ended");
}

/// A check that panics is answered as an internal failure, and does not stop later checks.
#[tokio::test]
async fn a_panicking_readiness_check_is_answered_and_retried() {
    let first = Arc::new(AtomicBool::new(true));
    let f = first.clone();
    let ep = Endpoints::new(
        Registry::default(),
        Arc::new(move || {
            if f.swap(false, Ordering::SeqCst) {
                panic!("boom");
            }
            Ok("ready".into())
        }),
    );
    let (code, _, body) = ep.answer(&hyper::Method::GET, "/readyz").await;
    assert_eq!(code, hyper::StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, "readiness check failed internally\n");
    for _ in 0..100 {
        if ep.answer(&hyper::Method::GET, "/readyz").await.0 == hyper::StatusCode::OK {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the check never ran again");
}
