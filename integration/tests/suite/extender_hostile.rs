//! graft-scheduler-extender, the real binary, against hostile local clients, as an
//! unprivileged process on a control-plane node can be: bodies of 32 MiB, 200 sockets that
//! connect and send nothing or trickle bytes while the scheduler's calls come in, a caller
//! without kube-scheduler's client certificate, and an impostor on the extender's port
//! while it is down. The extender serves HTTPS with certificates as the chart makes them
//! (graft's CA, a serving and a client certificate); kube-scheduler is played by curl
//! trusting graft's CA alone, with the client certificate. Its API server is a stand-in
//! that lists no slices, claims or nodes (the extender then scores every node 0, which is
//! all these calls need). Needs the workspace binaries, openssl and curl; no testbed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use graft_integration::extender_pki::ExtenderPki;
use graft_integration::testbed::workspace_bin;

/// Serves empty lists for every LIST and holds every WATCH open, sending nothing.
fn fake_api_server() -> anyhow::Result<String> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            std::thread::spawn(move || api_connection(conn));
        }
    });
    Ok(format!("http://{addr}"))
}

fn api_connection(conn: TcpStream) {
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split(' ').nth(1).unwrap_or("").to_string();
        // The headers; none of the extender's calls has a body.
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
        }
        if path.contains("watch=true") || path.contains("watch=1") {
            let _ = out.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
            );
            std::thread::sleep(Duration::from_secs(3600));
            return;
        }
        let (api, kind) = if path.contains("resourceslices") {
            ("resource.k8s.io/v1", "ResourceSliceList")
        } else if path.contains("/nodes") {
            // The Node watch asks for metadata only.
            ("meta.k8s.io/v1", "PartialObjectMetadataList")
        } else {
            ("resource.k8s.io/v1", "ResourceClaimList")
        };
        let body = format!(
            r#"{{"apiVersion":"{api}","kind":"{kind}","metadata":{{"resourceVersion":"1"}},"items":[]}}"#
        );
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        if out.write_all(head.as_bytes()).is_err() || out.write_all(body.as_bytes()).is_err() {
            return;
        }
    }
}

struct Extender {
    child: Child,
    addr: String,
}

impl Drop for Extender {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Extender {
    fn start(pki: &ExtenderPki, api: &str, dir: &Path) -> anyhow::Result<Self> {
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"{api}\"}}}}]\n\
                 users: [{{name: u, user: {{}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\n\
                 current-context: x\n"
            ),
        )?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.join("extender.log"))?;
        let child = Command::new(workspace_bin("graft-scheduler-extender")?)
            .args(["--listen", &addr, "--metrics-addr", "off"])
            .arg("--tls-cert")
            .arg(pki.file("tls.crt"))
            .arg("--tls-key")
            .arg(pki.file("tls.key"))
            .arg("--tls-client-ca")
            .arg(pki.file("ca.crt"))
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting graft-scheduler-extender")?;
        Ok(Extender { child, addr })
    }

    /// Resident and peak resident memory, KiB.
    fn memory(&self) -> anyhow::Result<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let field = |name: &str| -> anyhow::Result<u64> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .with_context(|| format!("{name} not in /proc/PID/status"))
        };
        Ok((field("VmRSS:")?, field("VmHWM:")?))
    }
}

const PRIORITIZE: &str = r#"{"Pod":{"metadata":{"name":"p","namespace":"ns","uid":"u"},"spec":{"containers":[]}},"Nodes":null,"NodeNames":["a","b"]}"#;

/// curl as kube-scheduler calls the extender at `addr` (trusting graft's CA alone, with
/// kube-scheduler's client certificate unless `anonymous`), POSTing `body` (`@file` too).
fn curl(pki: &ExtenderPki, addr: &str, body: &str, extra: &[&str], anonymous: bool) -> Output {
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "10", "-o", "-", "-w", "\n%{http_code}"])
        .arg("--cacert")
        .arg(pki.file("ca.crt"));
    if !anonymous {
        c.arg("--cert")
            .arg(pki.file("client.crt"))
            .arg("--key")
            .arg(pki.file("client.key"));
    }
    c.args([
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        body,
    ])
    .args(extra)
    .arg(format!("https://{addr}/prioritize"));
    c.output().unwrap_or_else(|e| Output {
        status: std::process::ExitStatus::default(),
        stdout: Vec::new(),
        stderr: e.to_string().into_bytes(),
    })
}

/// The HTTP status curl saw (0: none), and what it printed.
fn status(o: &Output) -> (u16, String) {
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let code = out.lines().last().and_then(|l| l.parse().ok()).unwrap_or(0);
    (code, format!("{out}{}", String::from_utf8_lossy(&o.stderr)))
}

/// Keeps `n` sockets open to `addr`, half silent and half sending a byte every 300 ms,
/// replacing those the extender closes, until `stop`.
fn slow_crowd(addr: String, n: usize, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut socks: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
        let mut opened = 0;
        while !stop.load(Ordering::Relaxed) {
            for (i, s) in socks.iter_mut().enumerate() {
                let alive = match s {
                    // A trickle: one byte of a TLS record that never completes.
                    Some(sock) if i % 2 == 1 => sock.write_all(&[0x16]).is_ok(),
                    Some(sock) => {
                        let mut b = [0u8; 1];
                        // Read 0 (closed) or an error other than "nothing yet": gone.
                        matches!(sock.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
                    }
                    None => false,
                };
                if !alive {
                    *s = TcpStream::connect(&addr).ok().inspect(|t| {
                        let _ = t.set_nonblocking(true);
                    });
                    opened += 1;
                }
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        opened
    })
}

#[test]
fn extender_survives_hostile_clients() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let pki = ExtenderPki::create(&dir.path().join("pki"))?;
    let api = fake_api_server()?;
    let ext = Extender::start(&pki, &api, dir.path())?;
    let addr = ext.addr.clone();
    let log = || std::fs::read_to_string(dir.path().join("extender.log")).unwrap_or_default();

    // Ready: it answers kube-scheduler's call (503 until its caches are listed).
    let start = Instant::now();
    loop {
        let (code, out) = status(&curl(&pki, &addr, PRIORITIZE, &[], false));
        if code == 200 {
            ensure!(out.contains(r#"{"Host":"a","Score":0}"#), "{out}");
            break;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(30),
            "the extender never answered: {out}\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // 32 MiB bodies, declared and chunked, 4 at once: refused (413 or closed), and the
    // extender's peak memory barely moves.
    let big = dir.path().join("big.json");
    std::fs::write(&big, vec![b' '; 32 << 20])?;
    let big_arg = format!("@{}", big.display());
    let (_, peak_before) = ext.memory()?;
    let senders: Vec<_> = (0..4)
        .map(|i| {
            let (pki_dir, addr, big_arg) = (pki.dir.clone(), addr.clone(), big_arg.clone());
            std::thread::spawn(move || {
                let pki = ExtenderPki { dir: pki_dir };
                // No `Expect: 100-continue` (kube-scheduler sends none): the body comes at once.
                let chunked: &[&str] = if i % 2 == 0 {
                    &["-H", "Expect:"]
                } else {
                    &["-H", "Expect:", "-H", "Transfer-Encoding: chunked"]
                };
                status(&curl(&pki, &addr, &big_arg, chunked, false))
            })
        })
        .collect();
    for s in senders {
        let (code, out) = s.join().map_err(|_| anyhow::anyhow!("a sender panicked"))?;
        // 0: closed before an answer; 100: an interim answer, then closed.
        ensure!(
            matches!(code, 413 | 0 | 100),
            "a 32 MiB body got {code}, not 413 or a closed connection: {out}"
        );
    }
    let (_, peak) = ext.memory()?;
    ensure!(
        peak < peak_before + 8 * 1024,
        "32 MiB bodies took the extender's peak memory from {peak_before} KiB to {peak} KiB"
    );
    eprintln!("32 MiB bodies: peak memory {peak_before} KiB -> {peak} KiB");

    // 200 slow sockets, kept at 200 as the extender closes them, while 20 of the
    // scheduler's calls are answered within 10 s all told.
    let stop = Arc::new(AtomicBool::new(false));
    let crowd = slow_crowd(addr.clone(), 200, stop.clone());
    std::thread::sleep(Duration::from_secs(3));
    let start = Instant::now();
    for i in 0..20 {
        let (code, out) = status(&curl(&pki, &addr, PRIORITIZE, &[], false));
        ensure!(code == 200, "call {i} among slow sockets: {code}: {out}");
    }
    let took = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let opened = crowd
        .join()
        .map_err(|_| anyhow::anyhow!("the crowd panicked"))?;
    eprintln!("20 calls among 200 slow sockets ({opened} opened in all) took {took:?}");
    ensure!(
        took < Duration::from_secs(10),
        "20 calls took {took:?} among slow sockets"
    );

    // A caller without kube-scheduler's certificate is refused at the handshake.
    let (code, out) = status(&curl(&pki, &addr, PRIORITIZE, &[], true));
    ensure!(
        code == 0,
        "a caller without a client certificate got {code}: {out}"
    );

    // The extender goes down; an impostor takes its port, over TLS with its own
    // certificate for the same names, and then over plain HTTP: kube-scheduler's client,
    // trusting graft's CA alone, believes neither.
    drop(ext);
    let mut tls_impostor = Command::new("openssl")
        .args(["s_server", "-quiet", "-www", "-accept", &addr])
        .arg("-cert")
        .arg(pki.file("impostor.crt"))
        .arg("-key")
        .arg(pki.file("impostor.key"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let start = Instant::now();
    while TcpStream::connect(&addr).is_err() {
        ensure!(
            start.elapsed() < Duration::from_secs(10),
            "the impostor never listened"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, out) = status(&curl(&pki, &addr, PRIORITIZE, &[], false));
    let _ = tls_impostor.kill();
    let _ = tls_impostor.wait();
    ensure!(code == 0, "a TLS impostor was believed ({code}): {out}");
    ensure!(out.contains("certificate") || out.contains("SSL"), "{out}");

    let plain = TcpListener::bind(&addr)?;
    std::thread::spawn(move || {
        for mut c in plain.incoming().flatten() {
            let _ = c.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 29\r\n\r\n[{\"Host\":\"evil\",\"Score\":10}]",
            );
        }
    });
    let (code, out) = status(&curl(&pki, &addr, PRIORITIZE, &[], false));
    ensure!(
        code == 0 && !out.contains("evil"),
        "a plain-HTTP impostor was believed ({code}): {out}"
    );
    Ok(())
}
