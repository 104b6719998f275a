//! Serving the router on one listener, plain HTTP or TLS, with a bounded edge.
//!
//! Both listeners share one accept loop and one per-connection driver, so every
//! bound holds on both: at most `http.max_connections` connections (beyond it a
//! new one gets a 503 on plain HTTP, or is closed, without taking a task), a
//! TLS handshake, the first request and every HTTP/1 request head must each
//! arrive within `http.header_read_timeout`, a connection with no request in
//! flight for `http.idle_timeout` is closed (counted in requests, not bytes:
//! see `activity`), and h2c is off unless configured. What a request may do once its head is in (its size, its host,
//! its duration) is checked by the router ([`crate::api::edge`]).
//!
//! Stopping has a deadline (`[shutdown] timeout`; see [`serve`]): the listener
//! closes at once, requests in flight may finish within the drain time, a
//! connection with nothing in flight (idle, or holding half a request head) is
//! closed at once, and whatever is still open at the drain deadline is dropped.
//!
//! With TLS, ALPN offers HTTP/2 and HTTP/1.1. When a client CA is configured, a
//! client certificate is optional at the TLS layer (tools in sandboxes have none)
//! but, when presented, must chain to that CA; the verified fact is attached to
//! every request of the connection as [`ClientCertificate`].

mod activity;

mod tls;

pub use tls::{
    install_crypto_provider, read_certificates, read_roots, tls_config, ClientCertificate,
};

use crate::config::HttpConfig;
use activity::{Counted, RequestActivity};
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tower::ServiceExt;

/// Set on every request: the address the connection arrived on (the `Host`
/// allow-list compares against its port).
#[derive(Debug, Clone, Copy)]
pub struct LocalAddr(pub SocketAddr);

/// After a graceful close was asked, how long a connection may linger.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// While the server stops, how long a connection with nothing in flight may
/// take to finish writing its last answer before it is dropped.
const DRAIN_QUIET: Duration = Duration::from_millis(250);
/// How often a draining connection looks at whether it may go.
const DRAIN_TICK: Duration = Duration::from_millis(50);

/// What the server asks of its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Serving,
    /// Finish what is in flight, take nothing new.
    Draining,
    /// The drain deadline passed: close now.
    Closing,
}
/// Descriptors kept for files, the listener, outgoing HTTPS and slack, on top
/// of the store and backend pools (`http.reserved_fds`), when the cap is
/// derived from the limit.
const RESERVED_FDS: u64 = 128;
/// The derived cap never exceeds this: beyond it a connection costs memory,
/// not descriptors. `http.max_connections` sets any other value.
const DEFAULT_CAP_MAX: u64 = 4096;
/// Refused connections lingering at once; beyond it one is closed right after its answer.
const REFUSERS: usize = 256;

const FULL_BODY: &str =
    "{\"error\":{\"code\":\"too_many_connections\",\"message\":\"the broker is at its connection limit\"}}\n";

/// The answer to a connection beyond the cap.
fn full_response() -> Vec<u8> {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{FULL_BODY}",
        FULL_BODY.len()
    )
    .into_bytes()
}

/// The connection cap in force: the configured one, or what the descriptor
/// limit leaves after the pools and [`RESERVED_FDS`], at most [`DEFAULT_CAP_MAX`].
pub fn connection_cap(http: &HttpConfig) -> usize {
    match http.max_connections {
        Some(n) => n as usize,
        None => {
            let soft = crate::rlimit::open_files().unwrap_or(1024);
            soft.saturating_sub(RESERVED_FDS + http.reserved_fds)
                .clamp(16, DEFAULT_CAP_MAX) as usize
        }
    }
}

/// Answers a connection beyond the cap with a 503 and closes it gracefully.
/// The answer is written at once, without a task (it fits the empty send
/// buffer); then, while fewer than [`REFUSERS`] are lingering, a task half-closes
/// and reads what the client sends for a moment, so the close does not reset
/// the connection before the client has read the answer.
fn refuse(tcp: tokio::net::TcpStream, refusers: &Arc<Semaphore>, response: &[u8]) {
    let _ = tcp.try_write(response);
    let Ok(permit) = refusers.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let _permit = permit;
        let mut tcp = tcp;
        let linger = async {
            tcp.shutdown().await?;
            let mut sink = [0u8; 4096];
            while tcp.read(&mut sink).await? > 0 {}
            Ok::<_, std::io::Error>(())
        };
        let _ = tokio::time::timeout(Duration::from_millis(100), linger).await;
    });
}

/// Serves `router` on `listener` (over TLS when `tls` is set) until `shutdown`
/// completes; then stops accepting, lets requests in flight finish for at most
/// `drain`, and returns once every connection is closed (or dropped at `drain`).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    http: HttpConfig,
    tls: Option<ServerConfig>,
    shutdown: impl Future<Output = ()> + Send,
    drain: Duration,
) -> anyhow::Result<()> {
    let local = listener.local_addr()?;
    let cap = connection_cap(&http);
    let slots = Arc::new(Semaphore::new(cap));
    let acceptor = tls.map(|c| tokio_rustls::TlsAcceptor::from(Arc::new(c)));
    let (stop_tx, stop_rx) = watch::channel(Stop::Serving);
    let http = Arc::new(http);
    let refusers = Arc::new(Semaphore::new(REFUSERS));
    let full = full_response();
    let mut warned_full: Option<Instant> = None;
    let mut warned_accept: Option<Instant> = None;
    tracing::info!(%local, max_connections = cap, header_read_timeout = ?http.header_read_timeout,
        idle_timeout = ?http.idle_timeout, request_timeout = ?http.request_timeout,
        allowed_hosts = ?http.allowed_hosts, "HTTP edge");
    if local.ip().is_unspecified() && http.allowed_hosts == crate::config::AllowedHosts::Any {
        // Also reachable as 127.0.0.1: a page in a browser on this host could
        // rebind its name to it and read what needs no token.
        tracing::warn!(%local, "listening on every address with any Host answered; set http.allowed_hosts to the names clients use");
    }
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE/ENFILE: retrying at once would spin; the cap should
                    // keep this from happening, so say so when it does.
                    if throttle(&mut warned_accept) {
                        if matches!(e.raw_os_error(), Some(23) | Some(24)) {
                            tracing::error!(error = %e, open_files_limit = ?crate::rlimit::open_files(),
                                open_connections = cap - slots.available_permits(),
                                "out of file descriptors: new connections wait; raise the limit (LimitNOFILE, ulimit -n) or lower http.max_connections");
                        } else {
                            tracing::warn!(error = %e, "accept failed");
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if throttle(&mut warned_full) {
                tracing::warn!(
                    max_connections = cap,
                    "connection limit reached; refusing new connections"
                );
            }
            if acceptor.is_none() {
                refuse(tcp, &refusers, &full);
            }
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let router = router.clone();
        let http = http.clone();
        let stop = stop_rx.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let _slot = slot;
            match acceptor {
                None => drive(tcp, None, router, local, &http, stop, peer).await,
                Some(acceptor) => {
                    // The handshake is part of the request head: same deadline,
                    // and a stopping server does not wait for it.
                    let mut stopping = stop.clone();
                    let handshake =
                        tokio::time::timeout(http.header_read_timeout, acceptor.accept(tcp));
                    let stream = tokio::select! {
                        done = handshake => match done {
                            Ok(Ok(s)) => s,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "TLS handshake timed out");
                                return;
                            }
                        },
                        _ = stopping.wait_for(|s| *s != Stop::Serving) => return,
                    };
                    // rustls only reports peer certificates it verified against the client CA.
                    let verified = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .map(|leaf| ClientCertificate {
                            sha256: crate::ids::sha256_hex(leaf.as_ref()),
                        });
                    drive(stream, Some(verified), router, local, &http, stop, peer).await
                }
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(Stop::Draining);
    // Every connection holds a slot until it is gone.
    let open = cap - slots.available_permits();
    tracing::info!(
        open_connections = open,
        ?drain,
        "stopped accepting; draining connections"
    );
    let drained = tokio::time::timeout(drain, slots.acquire_many(cap as u32)).await;
    if drained.is_err() {
        let open = cap - slots.available_permits();
        tracing::warn!(
            open_connections = open,
            ?drain,
            "requests still in flight at the drain deadline; closing their connections"
        );
        let _ = stop_tx.send(Stop::Closing);
        let _ =
            tokio::time::timeout(Duration::from_millis(500), slots.acquire_many(cap as u32)).await;
    }
    Ok(())
}

/// True at most once per 10 s (for warnings a flood would repeat).
fn throttle(last: &mut Option<Instant>) -> bool {
    let now = Instant::now();
    if last.is_some_and(|t| now.duration_since(t) < Duration::from_secs(10)) {
        return false;
    }
    *last = Some(now);
    true
}

/// Serves one connection: `tls` is `None` for plain HTTP, `Some(cert)` for TLS.
async fn drive<I>(
    io: I,
    tls: Option<Option<ClientCertificate>>,
    router: Router,
    local: SocketAddr,
    http: &HttpConfig,
    mut stop: watch::Receiver<Stop>,
    peer: SocketAddr,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let plain = tls.is_none();
    let cert = tls.flatten();
    let service = router.map_request(move |mut req: hyper::Request<hyper::body::Incoming>| {
        req.extensions_mut().insert(LocalAddr(local));
        if let Some(cert) = &cert {
            req.extensions_mut().insert(cert.clone());
        }
        req
    });
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(http.header_read_timeout)
        .max_buf_size(64 * 1024);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(64)
        .max_header_list_size(32 * 1024)
        // No server pings: a client's pong would count as activity and keep
        // an idle connection (and its slot) forever; idle_timeout ends it.
        .keep_alive_interval(None);
    if plain && !http.h2c {
        builder = builder.http1_only();
    }
    let activity = RequestActivity::new();
    let service = Counted::new(service, activity.clone());
    let conn = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
    tokio::pin!(conn);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut closing: Option<Instant> = None;
    // A server stop lets requests in progress finish (the drain deadline of
    // `serve` bounds it) and closes the connection once nothing is in flight;
    // an idle close gives the connection CLOSE_GRACE.
    let mut draining = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            changed = stop.changed() => {
                let asked = if changed.is_ok() { *stop.borrow_and_update() } else { Stop::Closing };
                match asked {
                    Stop::Serving => {}
                    Stop::Draining if !draining => {
                        draining = true;
                        if closing.is_none() {
                            conn.as_mut().graceful_shutdown();
                            closing = Some(Instant::now());
                        }
                        tick = tokio::time::interval(DRAIN_TICK);
                    }
                    Stop::Draining => {}
                    Stop::Closing => {
                        tracing::debug!(%peer, "drain deadline: dropping the connection");
                        return;
                    }
                }
            }
            _ = tick.tick() => match closing {
                // Stopping: nothing in flight (idle, or a request head still
                // arriving, which hyper's graceful close would wait for) and the
                // last answer had time to go out.
                Some(_) if draining && activity.idle_for() >= DRAIN_QUIET => {
                    tracing::debug!(%peer, "stopping: closing a connection with nothing in flight");
                    return;
                }
                Some(_) if draining => {}
                Some(since) if since.elapsed() > CLOSE_GRACE => {
                    tracing::debug!(%peer, "idle connection did not close; dropping it");
                    return;
                }
                Some(_) => {}
                // The first request must come within the head deadline, on
                // every protocol (hyper's own timer covers HTTP/1 heads only;
                // an HTTP/2 peer or one that never finishes its preface
                // would otherwise keep the slot until idle_timeout).
                None if !activity.any_request() && activity.age() >= http.header_read_timeout => {
                    tracing::debug!(%peer, "no request within the header deadline; dropping the connection");
                    return;
                }
                None if activity.idle_for() >= http.idle_timeout => {
                    tracing::debug!(%peer, "closing an idle connection");
                    conn.as_mut().graceful_shutdown();
                    closing = Some(Instant::now());
                }
                None => {}
            }
        }
    }
}
