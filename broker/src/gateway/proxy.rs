//! The proxy's request handling: who is asking (the run token in
//! `Proxy-Authorization`), where to (`CONNECT host:port`, or an absolute-form
//! `http://host[:port]/…` request), and then the decision (`decide`) before any
//! connection; for `CONNECT`, the TLS ClientHello's server name before any byte
//! goes upstream (`sni`).
//!
//! Absolute-form requests are relayed one per upstream connection, each decided
//! anew, with the hop-by-hop and proxy headers removed and the `Host` header
//! required to name the destination decided (a `Host` naming another virtual
//! host on the same address would reach a destination policy never saw).

use super::answer::{refusal_response, strip_hop_by_hop};
use super::body::{whole_upstream, Direction, ProxyBody};
use super::decide::{audit_for, Allowed, Bound, Denial};
use super::refusal::{Code, Refusal};
use super::sni::{read_client_hello, HelloError};
use super::traffic::Cut;
use super::Gateway;
use crate::backends::net::grammar::{normalise, Destination, Host};
use crate::grant::run_token::{run_from, RunTokenError};
use crate::grant::Door;
use crate::injection::sessions::placeholders_in;
use crate::store::runs::RunRecord;
use base64::Engine as _;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The run token a client presents: `Bearer TOKEN`, or `Basic` with the token
/// as the password (what `http://user:TOKEN@gateway` proxy URLs send).
fn token(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::PROXY_AUTHORIZATION)?.to_str().ok()?;
    let (scheme, rest) = value.trim().split_once(' ')?;
    if scheme.eq_ignore_ascii_case("bearer") {
        return Some(rest.trim().to_owned());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest.trim())
            .ok()?;
        let text = String::from_utf8(decoded).ok()?;
        return text.split_once(':').map(|(_, pass)| pass.to_owned());
    }
    None
}

async fn authenticate(gw: &Gateway, headers: &HeaderMap) -> Result<Arc<RunRecord>, Refusal> {
    let Some(token) = token(headers) else {
        return Err(Refusal::new(
            Code::ProxyAuthRequired,
            "present the run token: Proxy-Authorization: Bearer TOKEN (or Basic with it as the password)",
        ));
    };
    run_from(&gw.app, &token).await.map_err(|e| match e {
        RunTokenError::Store(_) => Refusal::new(Code::StoreUnavailable, "the store is unavailable"),
        RunTokenError::Invalid => {
            Refusal::new(Code::ProxyAuthRequired, "invalid or unknown run token")
        }
    })
}

/// The destination of a request, in the grammar's one spelling.
fn destination(req: &Request<Incoming>) -> Result<Destination, Refusal> {
    let bad = |m: &str| Refusal::new(Code::InvalidDestination, m.to_owned());
    let uri = req.uri();
    let authority = uri.authority().ok_or_else(|| {
        bad("this is a proxy: send CONNECT host:port or an absolute-form http:// request")
    })?;
    if authority.as_str().contains('@') {
        return Err(bad("a destination carries no credentials"));
    }
    let port = if req.method() == Method::CONNECT {
        authority
            .port_u16()
            .ok_or_else(|| bad("CONNECT needs host:port"))?
    } else {
        match uri.scheme_str() {
            Some("http") => authority.port_u16().unwrap_or(80),
            _ => {
                return Err(bad(
                    "only http:// is relayed in absolute form; use CONNECT for TLS",
                ))
            }
        }
    };
    normalise(authority.host(), port)
        .ok_or_else(|| bad("not a host name or address literal the gateway accepts"))
}

async fn connect(
    addrs: &[SocketAddr],
    timeout: std::time::Duration,
) -> Option<(TcpStream, SocketAddr)> {
    for addr in addrs {
        if let Ok(Ok(tcp)) = tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            let _ = tcp.set_nodelay(true);
            return Some((tcp, *addr));
        }
    }
    None
}

/// A proxy connection's place under `gateway.max_connections`.
pub type Slot = Arc<std::sync::Mutex<Option<tokio::sync::OwnedSemaphorePermit>>>;

/// The one service: every request the proxy's connections carry.
pub async fn handle(
    gw: Arc<Gateway>,
    slot: Slot,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let answer = async {
        let run = authenticate(&gw, req.headers()).await?;
        let dest = destination(&req)?;
        if req.method() == Method::CONNECT {
            tunnel(gw.clone(), run, dest, req, slot).await
        } else {
            forward(&gw, run, dest, req).await
        }
    };
    Ok(answer.await.unwrap_or_else(|r| refusal_response(&r)))
}

/// `CONNECT`: decide, answer 200, read the ClientHello, check its name, and
/// only then connect and relay.
async fn tunnel(
    gw: Arc<Gateway>,
    run: Arc<RunRecord>,
    dest: Destination,
    req: Request<Incoming>,
    slot: Slot,
) -> Result<Response<ProxyBody>, Refusal> {
    let allowed = gw.admit(&run, &dest).await?;
    let held = slot.lock().ok().and_then(|mut s| s.take());
    let rule = match &dest.host {
        Host::Name(name) => gw
            .app
            .injection
            .rule_for(name, dest.port)
            .map(|(n, _)| n.clone()),
        Host::Ip(_) => None,
    };
    tokio::spawn(async move {
        let _held = held; // the connection's slot, for the tunnel's life
        let Ok(upgraded) = hyper::upgrade::on(req).await else {
            return;
        };
        if let Some(rule) = rule {
            // A host with an injection rule: the gateway is the tool's TLS server.
            super::inject::intercept::intercept(gw, run, dest, rule, allowed, upgraded).await;
            return;
        }
        let mut client = TokioIo::new(upgraded);
        let timeout = gw.config.connect_timeout;
        let mut ended = allowed.conn.run().cut_signal();
        let hello = tokio::select! {
            read = read_client_hello(&mut client, timeout) => read,
            _ = ended.wait_for(|cut| *cut) => return,
        };
        let (hello, sni) = match hello {
            Ok(read) => read,
            Err(e) => {
                let why = match e {
                    HelloError::NotTls => "not_tls",
                    HelloError::Timeout => "no_client_hello",
                    HelloError::Closed => return,
                };
                gw.refuse_tunnel(&run, &dest, why, None).await;
                return;
            }
        };
        let matches = match (&dest.host, &sni) {
            (Host::Name(name), Some(sni)) => name == sni,
            (Host::Ip(_), None) => true,
            _ => false,
        };
        if !matches {
            gw.refuse_tunnel(&run, &dest, "sni_mismatch", sni.as_deref())
                .await;
            return;
        }
        let Allowed { addrs, conn } = allowed;
        let Some((mut upstream, addr)) = connect(&addrs, timeout).await else {
            gw.app.metrics.egress("deny", "upstream");
            return;
        };
        conn.connected(addr);
        if !conn.add_up(hello.len()) || upstream.write_all(&hello).await.is_err() {
            return;
        }
        super::relay::relay(client, upstream, &conn, gw.config.max_connection_duration).await;
    });
    Ok(Response::new(ProxyBody::empty()))
}

/// About how many bytes a request or response head takes on the wire.
fn head_len(uri: &hyper::Uri, headers: &HeaderMap) -> usize {
    let line = 16 + uri.to_string().len();
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum::<usize>()
        + line
}

/// Largest body of a gated absolute-form request (read whole: its approval is
/// bound to its SHA-256).
const MAX_GATED_BODY: usize = 1 << 20;

/// Absolute-form `http://`: decide, connect, relay one request and its response.
async fn forward(
    gw: &Gateway,
    run: Arc<RunRecord>,
    dest: Destination,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Refusal> {
    let (mut parts, body) = req.into_parts();
    let authority = parts
        .uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_default();
    if let Some(host) = parts.headers.get(header::HOST) {
        let named = host
            .to_str()
            .ok()
            .and_then(|h| h.parse::<hyper::http::uri::Authority>().ok())
            .and_then(|a| normalise(a.host(), a.port_u16().unwrap_or(80)));
        if named.as_ref() != Some(&dest) {
            return Err(Refusal::new(
                Code::InvalidDestination,
                "the Host header must name the destination of the request line",
            ));
        }
    }
    // A placeholder is only ever worth something inside an intercepted
    // connection to its own API (HTTPS): here, in clear, it is refused.
    let uri = parts.uri.to_string();
    let carries_placeholder = placeholders_in(&uri).next().is_some()
        || parts.headers.values().any(|v| {
            placeholders_in(&String::from_utf8_lossy(v.as_bytes()))
                .next()
                .is_some()
        });
    if carries_placeholder {
        let denial = Denial {
            reason: "placeholder_misuse".into(),
            detail: None,
            metric: "placeholder",
            end_run: gw.config.end_run_on_placeholder_misuse,
        };
        let audit = audit_for(&run, &gw.resource(&dest));
        gw.refuse(Door::Connect, &run, audit, denial).await;
        return Err(Refusal::new(
            Code::PlaceholderRefused,
            "a placeholder is worth nothing here: only its own API, over HTTPS through this gateway, takes it",
        ));
    }
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.insert(
        header::HOST,
        HeaderValue::from_str(&authority)
            .map_err(|_| Refusal::new(Code::InvalidDestination, "bad authority"))?,
    );
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    parts.uri = path
        .parse()
        .map_err(|_| Refusal::new(Code::InvalidDestination, "bad request target"))?;

    // The connection carries this one request: an approval is bound to it —
    // method, path, query, body — not to the destination alone, so it is read
    // (bounded) before the gate when a gated permit covers it.
    let decided = gw.decide_connect(&run, &dest).await?;
    let (mut body, mut whole) = (Some(body), None);
    if decided.constraints.approval.is_some() {
        if let Some(b) = body.take() {
            let deadline = tokio::time::Instant::now() + gw.config.max_connection_duration;
            whole = Some(gw.read_whole(b, MAX_GATED_BODY, None, deadline).await?);
        }
    }
    let authority = dest.path();
    let (sent_path, query) = path.split_once('?').unwrap_or((&path, ""));
    let request = Bound {
        method: parts.method.as_str(),
        authority: &authority,
        path: sent_path,
        query: (query, true),
        headers: &[],
        body: whole.as_ref().map_or(&[], |w| &w.bytes[..]),
    };
    let Allowed { addrs, conn } = gw.connect_decided(&run, &dest, decided, &request).await?;
    // The request line and headers count against the allowance as the body does.
    if !conn.add_up(head_len(&parts.uri, &parts.headers)) {
        return Err(Refusal::new(
            Code::LimitReached,
            "the run has used its byte allowance",
        ));
    }
    let timeout = gw.config.connect_timeout;
    let Some((tcp, addr)) = connect(&addrs, timeout).await else {
        gw.app.metrics.egress("deny", "upstream");
        return Err(Refusal::new(
            Code::UpstreamUnavailable,
            format!("{} did not accept the connection", dest.path()),
        ));
    };
    conn.connected(addr);
    let conn = Arc::new(conn);
    let deadline = tokio::time::Instant::now() + gw.config.max_connection_duration;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|_| {
            Refusal::new(
                Code::UpstreamUnavailable,
                "the upstream HTTP handshake failed",
            )
        })?;
    // The upstream connection lives until its exchange is done, its deadline
    // passes or the run ends, whichever is first: dropping it ends both bodies,
    // even one that stopped sending.
    let watched = conn.clone();
    let mut ended = conn.run().cut_signal();
    tokio::spawn(async move {
        tokio::select! {
            _ = connection => {}
            _ = tokio::time::sleep_until(deadline) => watched.cut(Cut::DurationLimit),
            _ = ended.wait_for(|cut| *cut) => watched.cut(Cut::RunEnded),
        }
    });
    // A body read whole goes framed by its length; its memory is held until
    // the answer.
    let out_body = match (body, &whole) {
        (Some(inner), _) => ProxyBody::Relayed {
            inner,
            conn: conn.clone(),
            direction: Direction::Up,
            deadline,
            tally: None,
        },
        (None, w) => {
            let bytes = w.as_ref().map(|w| w.bytes.clone()).unwrap_or_default();
            whole_upstream(bytes, &conn, &mut parts.headers)?
        }
    };
    let upstream_req = Request::from_parts(parts, out_body);
    let resp = tokio::time::timeout_at(deadline, sender.send_request(upstream_req))
        .await
        .map_err(|_| {
            conn.cut(Cut::DurationLimit);
            Refusal::new(
                Code::UpstreamUnavailable,
                "the connection's longest life ended before the upstream answered",
            )
        })?
        .map_err(|_| Refusal::new(Code::UpstreamUnavailable, "the upstream failed"))?;
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    // Only the gateway names an approval (not the destination).
    parts.headers.remove(super::refusal::APPROVAL_ID_HEADER);
    if !conn.add_down(head_len(&hyper::Uri::default(), &parts.headers)) {
        conn.cut(Cut::ByteLimit);
        return Err(Refusal::new(
            Code::LimitReached,
            "the run has used its byte allowance",
        ));
    }
    Ok(Response::from_parts(
        parts,
        ProxyBody::Relayed {
            inner: body,
            conn,
            direction: Direction::Down,
            deadline,
            tally: None,
        },
    ))
}

impl Gateway {
    /// A tunnel whose first flight is refused (`not_tls`, `no_client_hello`,
    /// `sni_mismatch`): nothing was connected.
    pub(super) async fn refuse_tunnel(
        &self,
        run: &RunRecord,
        dest: &Destination,
        why: &str,
        sni: Option<&str>,
    ) {
        let denial = Denial {
            reason: why.to_owned(),
            detail: sni.map(|s| format!("sni={}", s.chars().take(253).collect::<String>())),
            metric: "sni",
            end_run: self.config.end_run_on_deny && why == "sni_mismatch",
        };
        let audit = audit_for(run, &self.resource(dest));
        self.refuse(Door::Connect, run, audit, denial).await;
    }
}
