//! A `CONNECT` to a host with an injection rule: the gateway is the tool's TLS
//! server (a leaf from the run's CA) and the API's TLS client (verified), and
//! every request between them is decided on its own.
//!
//! Order on a connection: the ClientHello's name must be the host decided; the
//! upstream is connected and its certificate verified *before* the tool's
//! handshake completes (no leaf is shown for an API the gateway could not
//! verify); then HTTP/1.1 requests are served one at a time. Per request: the
//! target is reduced to its one spelling (`backends::http::grammar`), the
//! `Host` must be the host decided, placeholders must be this run's for this
//! rule, the rule must cover the method and path, Cedar must permit the method
//! on `BACKEND:/path`, the decision is committed to the audit log
//! (`egress.request`), and only then are the tool's credentials stripped, the
//! rule's injected and the request sent. `egress.response` records the status
//! and bytes when the exchange is done.

use super::credential::{self, Outgoing};
use crate::audit::AuditEvent;
use crate::backends::http::grammar::{normalise_target, Target};
use crate::backends::http::HttpConfig;
use crate::backends::net::grammar::{normalise, Destination};
use crate::gateway::answer::{refusal_response, strip_hop_by_hop};
use crate::gateway::body::{whole_upstream, Direction, ProxyBody, Whole};
use crate::gateway::decide::{approval_binding, Allowed, Bound, Denial};
use crate::gateway::refusal::{Code, Refusal};
use crate::gateway::traffic::{Conn, Cut, Tally};
use crate::gateway::Gateway;
use crate::grant::{self, Ask, Door};
use crate::injection::sessions::{placeholders_in, RunSession};
use crate::store::runs::RunRecord;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Largest request body a SigV4 rule signs (it is read whole to be hashed).
pub const MAX_SIGNED_BODY: usize = 16 << 20;
/// MiB of bodies being read to be signed, in all (a hostile tool's uploads
/// cannot hold more of the gateway's memory than this); each request holds
/// its announced length, or the largest when it announces none.
pub const SIGNED_BODIES_MIB: usize = 256;

type Sender = hyper::client::conn::http1::SendRequest<ProxyBody>;

/// One intercepted connection.
struct Intercepted {
    gw: Arc<Gateway>,
    run: Arc<RunRecord>,
    dest: Destination,
    host: String,
    rule_name: String,
    rule: HttpConfig,
    session: Arc<RunSession>,
    conn: Arc<Conn>,
    addrs: Vec<SocketAddr>,
    upstream: tokio::sync::Mutex<Option<Sender>>,
    deadline: Instant,
}

/// Serves an intercepted tunnel until it closes, is cut or the run ends.
pub async fn intercept(
    gw: Arc<Gateway>,
    run: Arc<RunRecord>,
    dest: Destination,
    rule_name: String,
    allowed: Allowed,
    client: hyper::upgrade::Upgraded,
) {
    let host = dest.host.to_string();
    let Some((_, rule)) = gw.app.injection.rule_for(&host, dest.port).cloned() else {
        return;
    };
    let timeout = gw.config.connect_timeout;
    let acceptor = tokio_rustls::LazyConfigAcceptor::new(
        rustls::server::Acceptor::default(),
        TokioIo::new(client),
    );
    let start = match tokio::time::timeout(timeout, acceptor).await {
        Ok(Ok(start)) => start,
        Ok(Err(_)) => {
            gw.refuse_tunnel(&run, &dest, "not_tls", None).await;
            return;
        }
        Err(_) => {
            gw.refuse_tunnel(&run, &dest, "no_client_hello", None).await;
            return;
        }
    };
    let sni = start
        .client_hello()
        .server_name()
        .map(|s| s.to_ascii_lowercase());
    if sni.as_deref() != Some(host.as_str()) {
        gw.refuse_tunnel(&run, &dest, "sni_mismatch", sni.as_deref())
            .await;
        return;
    }
    let now = gw.app.clock.now();
    let session = match gw.app.injection.open(&run.id, now, run.expires_at) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot make the run's CA");
            return;
        }
    };
    let Allowed { addrs, conn } = allowed;
    let conn = Arc::new(conn);
    let this = Arc::new(Intercepted {
        gw: gw.clone(),
        run,
        dest,
        host: host.clone(),
        rule_name,
        rule,
        session: session.clone(),
        conn: conn.clone(),
        addrs,
        upstream: tokio::sync::Mutex::new(None),
        deadline: Instant::now() + gw.config.max_connection_duration,
    });
    // The API first: no leaf is shown for a host the gateway cannot verify.
    match this.connect_upstream().await {
        Ok(sender) => *this.upstream.lock().await = Some(sender),
        Err(why) => {
            tracing::warn!(host = %host, why, "injected destination unavailable");
            this.gw.app.metrics.egress("deny", "upstream");
            return;
        }
    }
    let config = match session.ca.server_config(&host, now) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot make a leaf certificate");
            return;
        }
    };
    let tls = match tokio::time::timeout(timeout, start.into_stream(config)).await {
        Ok(Ok(tls)) => tls,
        _ => return, // the tool did not accept the run's CA, or went away
    };
    let served = this.clone();
    let service = hyper::service::service_fn(move |req| {
        let served = served.clone();
        async move { Ok::<_, std::convert::Infallible>(served.handle(req).await) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .serve_connection(TokioIo::new(tls), service);
    let mut ended = conn.run().cut_signal();
    tokio::select! {
        _ = connection => {}
        _ = tokio::time::sleep_until(this.deadline) => conn.cut(Cut::DurationLimit),
        _ = ended.wait_for(|cut| *cut) => conn.cut(Cut::RunEnded),
    }
}

/// `x-amz-copy-source` as policy is shown it: S3 decodes it, so it is put in
/// the path's one spelling (`/bucket/key`, its `?versionId=…` kept).
fn copy_source(value: &str) -> Result<String, String> {
    let target = normalise_target(&format!("/{}", value.trim_start_matches('/')), false)
        .map_err(|why| format!("x-amz-copy-source: {why}"))?;
    Ok(match target.raw_query {
        Some(q) => format!("{}?{q}", target.decided),
        None => target.decided,
    })
}

/// Headers some frameworks read as the real method or path: policy decided the
/// request line, so a request carrying one is refused.
const OVERRIDES: [&str; 6] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-original-url",
    "x-rewrite-url",
    "x-original-method",
];

/// Headers that tell an API where a request came from or was addressed: the
/// tool does not get to say (some frameworks route or build URLs from them).
const FORWARDING: [&str; 6] = [
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-forwarded-prefix",
    "x-real-ip",
];

impl Intercepted {
    /// The `Host` the upstream is sent: the name, and the port unless 443.
    fn authority(&self) -> String {
        if self.dest.port == 443 {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.dest.port)
        }
    }

    async fn connect_upstream(&self) -> Result<Sender, &'static str> {
        let timeout = self.gw.config.connect_timeout;
        let mut tcp = None;
        for addr in &self.addrs {
            if let Ok(Ok(t)) = tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
                let _ = t.set_nodelay(true);
                self.conn.connected(*addr);
                tcp = Some(t);
                break;
            }
        }
        let tcp = tcp.ok_or("did not accept the connection")?;
        let name = rustls::pki_types::ServerName::try_from(self.host.clone())
            .map_err(|_| "not a server name")?;
        let connector = tokio_rustls::TlsConnector::from(self.gw.upstream_tls.clone());
        let tls = tokio::time::timeout(timeout, connector.connect(name, tcp))
            .await
            .map_err(|_| "TLS handshake timed out")?
            .map_err(|_| "its certificate did not verify")?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|_| "the HTTP handshake failed")?;
        tokio::spawn(connection);
        Ok(sender)
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<ProxyBody> {
        match self.clone().exchange(req).await {
            Ok(resp) => resp,
            Err(r) => refusal_response(&r),
        }
    }

    /// The `egress.request` row of `method` on `path` (the query redacted
    /// unless the rule logs it).
    fn audit(&self, method: &str, path: &str, raw_query: Option<&str>) -> AuditEvent {
        let method: String = method.chars().take(16).collect();
        let resource = format!("{}:{}", self.rule_name, path);
        let mut ev =
            grant::event::for_run(&self.run, Door::Request.allowed_event(), &method, &resource);
        let query = match (raw_query, self.rule.log_query) {
            (None, _) => String::new(),
            (Some(q), true) => format!(" query={}", q.chars().take(512).collect::<String>()),
            (Some(_), false) => " query=redacted".to_owned(),
        };
        ev.detail = Some(format!(
            "host={} rule={} auth={}{query}",
            self.authority(),
            self.rule_name,
            self.rule.auth.as_str()
        ));
        ev
    }

    /// A refused target as the audit names it: its path part, at most 200
    /// characters (never its query, which may carry anything).
    fn unparsed(&self, raw_target: &str) -> String {
        raw_target
            .split('?')
            .next()
            .unwrap_or_default()
            .chars()
            .take(200)
            .collect()
    }

    /// The checks that make a request decidable: an origin-form target naming
    /// this connection's host, in its one spelling; no header that changes the
    /// request line upstream; for SigV4, no `x-amz-*` header policy does not
    /// see; the headers policy reads, visible ASCII and not repeated with
    /// another value. Removes the hop's and the forwarding headers. Returns the
    /// target and the `name=value` headers policy is shown, or why not.
    fn check(
        &self,
        parts: &mut hyper::http::request::Parts,
        raw_target: &str,
    ) -> Result<(Target, Vec<String>), String> {
        if parts.uri.authority().is_some() || parts.uri.path_and_query().is_none() {
            return Err("send an origin-form request target (/path)".into());
        }
        if let Some(h) = parts.headers.get(header::HOST) {
            let named = h
                .to_str()
                .ok()
                .and_then(|h| h.parse::<hyper::http::uri::Authority>().ok())
                .and_then(|a| normalise(a.host(), a.port_u16().unwrap_or(443)));
            if named.as_ref() != Some(&self.dest) {
                return Err("the Host header must name the host of the connection".into());
            }
        }
        let target = normalise_target(raw_target, self.rule.case_insensitive_paths)?;
        // What the hop carries goes before anything is decided: a header named in
        // `Connection` must not vanish after policy read it.
        strip_hop_by_hop(&mut parts.headers);
        // The hop's framing too: the client side re-frames the body.
        parts.headers.remove(header::TRANSFER_ENCODING);
        if let Some(h) = OVERRIDES.iter().find(|h| parts.headers.contains_key(**h)) {
            return Err(format!(
                "{h}: a header that changes the method or path upstream is not relayed (policy decides the request line)"
            ));
        }
        for h in FORWARDING {
            parts.headers.remove(h);
        }
        if matches!(self.rule.auth, crate::backends::http::Auth::SigV4 { .. }) {
            // What the signature will authorise must be what policy saw.
            let unseen = parts.headers.keys().map(|n| n.as_str()).find(|n| {
                n.starts_with("x-amz-")
                    && !credential::SIGV4_OWN.contains(n)
                    && !credential::is_descriptive_amz(n)
                    && !self.rule.policy_headers.iter().any(|h| h == n)
            });
            if let Some(n) = unseen {
                return Err(format!(
                    "{n} changes what a signed request does: the rule must show it to policy (policy_headers)"
                ));
            }
        }
        let mut headers = Vec::new();
        for name in &self.rule.policy_headers {
            let mut shown: Option<String> = None;
            for value in parts.headers.get_all(name.as_str()) {
                let value = value
                    .to_str()
                    .map_err(|_| format!("{name}: a header policy reads must be visible ASCII"))?;
                let value = if name == "x-amz-copy-source" {
                    copy_source(value)?
                } else {
                    value.to_owned()
                };
                match &shown {
                    Some(before) if *before != value => {
                        return Err(format!("{name} repeated with another value"));
                    }
                    Some(_) => {}
                    None => {
                        headers.push(format!("{name}={value}"));
                        shown = Some(value);
                    }
                }
            }
        }
        Ok((target, headers))
    }

    /// Refuses a request: audited as `egress.denied` (rate-charged), the run
    /// ended when the denial says so.
    async fn refuse(&self, audit: AuditEvent, denial: Denial, refusal: Refusal) -> Refusal {
        self.gw
            .refuse(Door::Request, &self.run, audit, denial)
            .await;
        refusal
    }

    /// Reads the request body whole (one to be signed, or one an approval
    /// is bound to), once: at most [`MAX_SIGNED_BODY`], within the run's and
    /// the gateway's share of memory for bodies.
    async fn read_whole(
        &self,
        stream: &mut Option<Incoming>,
        whole: &mut Option<Whole>,
    ) -> Result<(), Refusal> {
        if let Some(body) = stream.take() {
            let share = Some(&self.session.signed_bodies);
            *whole = Some(
                self.gw
                    .read_whole(body, MAX_SIGNED_BODY, share, self.deadline)
                    .await?,
            );
        }
        Ok(())
    }

    async fn exchange(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Result<Response<ProxyBody>, Refusal> {
        let (mut parts, body) = req.into_parts();
        let method = parts.method.as_str().to_owned();
        let raw_target = parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.to_string(), |p| p.as_str().to_owned());

        // A placeholder anywhere but with its own run and rule is refused,
        // first: a malformed request does not hide one. (Header values as
        // bytes, the target as written and its query decoded.)
        let mut texts: Vec<String> = parts
            .headers
            .values()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        texts.push(raw_target.clone());
        if let Some((_, q)) = raw_target.split_once('?') {
            texts.extend(q.split('&').map(|p| {
                percent_encoding::percent_decode_str(p)
                    .decode_utf8_lossy()
                    .into_owned()
            }));
        }
        let misused = texts.iter().flat_map(|t| placeholders_in(t)).any(|p| {
            self.gw.app.injection.placeholder_owner(p)
                != Some((self.run.id.clone(), self.rule_name.clone()))
        });
        if misused {
            let denial = Denial {
                reason: "placeholder_misuse".into(),
                detail: Some(format!("host={} rule={}", self.authority(), self.rule_name)),
                metric: "placeholder",
                end_run: self.gw.config.end_run_on_placeholder_misuse,
            };
            let r = Refusal::new(
                Code::PlaceholderRefused,
                "a placeholder is worth nothing here: it belongs to another API or run",
            );
            let audit = self.audit(&method, &self.unparsed(&raw_target), None);
            return Err(self.refuse(audit, denial, r).await);
        }

        // The request in its one spelling, and what policy reads of it; a
        // request that has none is refused, audited like every refusal.
        let (target, headers) = match self.check(&mut parts, &raw_target) {
            Ok(checked) => checked,
            Err(why) => {
                let denial = Denial {
                    reason: "invalid_request".into(),
                    detail: Some(format!("why={why}")),
                    metric: "invalid",
                    end_run: false,
                };
                let audit = self.audit(&method, &self.unparsed(&raw_target), None);
                let r = Refusal::new(Code::InvalidDestination, why);
                return Err(self.refuse(audit, denial, r).await);
            }
        };
        let audit = self.audit(&method, &target.decided, target.raw_query.as_deref());
        if !self.rule.covers(&method, &target.decided) {
            let denial = Denial {
                reason: "not_covered".into(),
                detail: None,
                metric: "not_covered",
                end_run: false,
            };
            let r = Refusal::new(
                Code::RequestDenied,
                format!(
                    "{method} {} is not a request this API's rule covers",
                    target.decided
                ),
            );
            return Err(self.refuse(audit, denial, r).await);
        }

        let app = &self.gw.app;
        let resource = format!("{}:{}", self.rule_name, target.decided);
        let arguments =
            serde_json::json!({ "host": self.host, "query": target.query, "headers": headers });
        let invalid = |m: &str| Refusal::new(Code::InvalidDestination, m.to_owned());
        let ask = Ask {
            door: Door::Request,
            run: &self.run,
            action: &method,
            resource: &resource,
            requested_ttl: None,
            arguments: Some(&arguments),
            request_id: None,
            detail: audit.detail.clone(),
            end_run_on_deny: self.gw.config.end_run_on_deny,
        };
        let denied = || format!("policy does not permit {method} {}", target.decided);
        let decided = grant::decide(app, ask)
            .await
            .map_err(|r| self.gw.refused(&self.run, r, Code::RequestDenied, denied))?;
        // A gated request is bound to its body too: it is read (bounded) first.
        let (mut stream, mut whole) = (Some(body), None);
        if decided.constraints.approval.is_some() {
            self.read_whole(&mut stream, &mut whole).await?;
        }
        // Bound as it will be sent: the path as forwarded, the query, the
        // headers policy read, the body's bytes.
        let authority = self.dest.path();
        let sent_path = target.forward.split('?').next().unwrap_or_default();
        let request = Bound {
            method: &method,
            authority: &authority,
            path: sent_path,
            query: (
                target.raw_query.as_deref().unwrap_or(""),
                self.rule.log_query,
            ),
            headers: &headers,
            body: whole.as_ref().map_or(&[], |w| &w.bytes[..]),
        };
        let binding = approval_binding(&method, &resource, &request);
        let mut permit = decided
            .gate(app, binding, None)
            .await
            .map_err(|r| self.gw.refused(&self.run, r, Code::RequestDenied, denied))?;
        let mut audit = permit.decided.audit.clone();
        audit.detail = Some(format!(
            "{} policies={}",
            audit.detail.unwrap_or_default(),
            permit.decided.policies.join(",")
        ));
        permit.decided.audit = audit.clone();
        let redeemed = permit.redeemed.as_ref().map(|r| r.approval.clone());
        permit
            .record(app)
            .await
            .map_err(|r| self.gw.refused(&self.run, r, Code::RequestDenied, denied))?;
        if let Some(id) = redeemed {
            audit.detail = Some(format!(
                "{} approval={id}",
                audit.detail.unwrap_or_default()
            ));
        }
        app.metrics.egress("allow", "request");

        // Decided and recorded: now the request as it will be sent.
        credential::strip(&mut parts.headers, &self.rule);
        if !self.rule.cookies {
            parts.headers.remove(header::COOKIE);
        }
        let authority = self.authority();
        parts.headers.insert(
            header::HOST,
            HeaderValue::from_str(&authority).map_err(|_| invalid("bad host"))?,
        );
        parts.uri = target
            .forward
            .parse()
            .map_err(|_| invalid("bad request target"))?;
        let url = format!("https://{authority}{}", target.forward);
        let tally = Arc::new(Tally::new(self.gw.app.clone(), audit));
        let signed = matches!(self.rule.auth, crate::backends::http::Auth::SigV4 { .. });
        if signed {
            self.read_whole(&mut stream, &mut whole).await?;
        }
        // A body read whole goes framed by its length, counted first; the
        // memory it holds is held until the answer.
        let out_body = match (stream, &whole) {
            (Some(inner), _) => ProxyBody::Relayed {
                inner,
                conn: self.conn.clone(),
                direction: Direction::Up,
                deadline: self.deadline,
                tally: Some(tally.clone()),
            },
            (None, w) => {
                let bytes = w.as_ref().map(|w| w.bytes.clone()).unwrap_or_default();
                tally.up.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                whole_upstream(bytes, &self.conn, &mut parts.headers)?
            }
        };
        let out = Outgoing {
            method: &method,
            url: &url,
            decided_path: &target.decided,
            body: whole.as_ref().filter(|_| signed).map(|w| &w.bytes[..]),
        };
        credential::inject(
            &self.gw,
            &self.session,
            &self.run,
            &self.rule,
            out,
            &mut parts.headers,
        )
        .await?;
        let upstream_req = Request::from_parts(parts, out_body);
        let resp = self.send(upstream_req).await?;
        let (mut parts, body) = resp.into_parts();
        tally.status.store(parts.status.as_u16(), Ordering::Relaxed);
        strip_hop_by_hop(&mut parts.headers);
        // Only the gateway names an approval: an API's header of that name
        // would have the tool (or its SDK) wait for an approval of its choosing.
        parts
            .headers
            .remove(crate::gateway::refusal::APPROVAL_ID_HEADER);
        if !self.rule.cookies {
            // A session the API opens on the injected credential would outlive
            // the run in the tool's hands.
            parts.headers.remove(header::SET_COOKIE);
        }
        Ok(Response::from_parts(
            parts,
            ProxyBody::Relayed {
                inner: body,
                conn: self.conn.clone(),
                direction: Direction::Down,
                deadline: self.deadline,
                tally: Some(tally),
            },
        ))
    }

    /// Sends on the upstream connection, reconnecting (to the addresses
    /// decided) when the API closed it.
    async fn send(&self, req: Request<ProxyBody>) -> Result<Response<Incoming>, Refusal> {
        let mut held = self.upstream.lock().await;
        let ready = match held.as_mut() {
            Some(s) => s.ready().await.is_ok(),
            None => false,
        };
        if !ready {
            let sender = self.connect_upstream().await.map_err(|why| {
                Refusal::new(Code::UpstreamUnavailable, format!("{}: {why}", self.host))
            })?;
            *held = Some(sender);
        }
        let Some(sender) = held.as_mut() else {
            return Err(Refusal::new(
                Code::UpstreamUnavailable,
                "no upstream connection",
            ));
        };
        tokio::time::timeout_at(self.deadline, sender.send_request(req))
            .await
            .map_err(|_| {
                self.conn.cut(Cut::DurationLimit);
                Refusal::new(
                    Code::UpstreamUnavailable,
                    "the connection's longest life ended before the upstream answered",
                )
            })?
            .map_err(|_| Refusal::new(Code::UpstreamUnavailable, "the upstream failed"))
    }
}
