//! The extender's connections. Every connection is accepted at once, so that a crowd of
//! idle or slow sockets never leaves the scheduler's own connection waiting in the
//! kernel's backlog; each must finish its TLS handshake, and then each request's headers
//! and body, within [`READ_TIMEOUT`], and may sit idle between requests no longer than
//! that, or it is closed. At most [`MAX_OPEN`] are open at once: one more is closed as
//! soon as it is accepted, which its caller sees at once (an `ignorable` extender's
//! scheduler then goes on without scores) instead of after its `httpTimeout`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::rt::{Read, Write};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use crate::intake::{Gates, READ_TIMEOUT};
use crate::server::{handle, Shared};

/// Connections open at once; more are closed when accepted.
pub const MAX_OPEN: usize = 1024;
/// The longest a connection is kept, busy or not: then it is asked to close (the
/// scheduler opens another), so that no client keeps one by reading its answers slowly.
const MAX_AGE: Duration = Duration::from_secs(60);

/// Binds `addr`; the returned listener is then served by [`serve`].
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves `listener` (over TLS with `tls`) until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    shared: Shared,
) -> std::io::Result<()> {
    let open = Arc::new(Semaphore::new(MAX_OPEN));
    let gates = Gates::default();
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(c) => c,
            // Out of descriptors and the like pass; try again shortly.
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = open.clone().try_acquire_owned() else {
            tracing::debug!("{MAX_OPEN} connections open; closed a new one");
            shared.metrics.count("connection", "refused");
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (shared, gates, tls) = (shared.clone(), gates.clone(), tls.clone());
        tokio::spawn(async move {
            let _slot = slot;
            match tls {
                None => connection(TokioIo::new(tcp), shared, gates).await,
                Some(tls) => match tokio::time::timeout(READ_TIMEOUT, tls.accept(tcp)).await {
                    Ok(Ok(s)) => connection(TokioIo::new(s), shared, gates).await,
                    // Counted, not logged above debug: anything local can cause these. A
                    // kube-scheduler without the client certificate shows here.
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "TLS handshake failed");
                        shared.metrics.count("connection", "handshake_failed");
                    }
                    Err(_) => {
                        tracing::debug!("TLS handshake too slow; closed");
                        shared.metrics.count("connection", "slow");
                    }
                },
            }
        });
    }
}

/// Serves one connection's requests until it closes, times out or ages out.
async fn connection<I>(io: I, shared: Shared, gates: Gates)
where
    I: Read + Write + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let (s, g) = (shared.clone(), gates.clone());
        async move { Ok::<_, Infallible>(handle(s, g, req).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // hyper starts this timer whenever it waits for a request's headers, idle ones too.
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT);
    let conn = builder.serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let ended = tokio::select! {
        r = conn.as_mut() => Some(r),
        () = tokio::time::sleep(MAX_AGE) => None,
    };
    let ended = match ended {
        Some(r) => r,
        None => {
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout(READ_TIMEOUT, conn).await {
                Ok(r) => r,
                Err(_) => return,
            }
        }
    };
    if let Err(e) = ended {
        tracing::debug!(error = %e, "extender connection ended with an error");
    }
}
