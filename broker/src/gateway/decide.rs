//! The connect door: one decision per connection, in this order, each step
//! able to refuse and none connecting anything:
//!
//! 1. the decision layer ([`crate::grant`]): the run is active, the
//!    destination is in the `net` grammar and `connect` is declared, Cedar
//!    decides `connect` on `net:HOST:PORT` (a forbid wins; default deny), and
//!    a permit with `@approval` holds only through an approval bound to this
//!    connection (`403 approval_pending` with `Tessera-Approval-Id` until one
//!    is given; the identical retry then passes once);
//! 2. the name is resolved once, by the gateway, and **every** address it has is
//!    classified (`addresses`): a non-public one is refused unless a satisfied
//!    permit's `@allow_addresses` contains it;
//! 3. the run's open-connection and byte allowances are checked;
//! 4. the decision is recorded by the decision layer (rate-charged, audited as
//!    `egress.allowed`) and only after its commit may the caller connect — to
//!    the addresses returned here, never to a second lookup's.
//!
//! A refusal is audited as `egress.denied` and ends the run when
//! `gateway.end_run_on_deny` or the forbid's `@on_deny("end_run")` says so.

use super::addresses::{self, Range};
use super::refusal::{Code, Refusal};
use super::traffic::{Conn, Limits};
use super::Gateway;
use crate::audit::AuditEvent;
use crate::backends::net::cidr::Cidr;
use crate::backends::net::grammar::{Destination, Host, CONNECT};
use crate::grant::approval::Binding;
use crate::grant::{self, record, ApprovalRefusal, Ask, Decided, Door, Refused};
use crate::injection::sessions::placeholders_in;
use crate::store::runs::RunRecord;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// A permitted, recorded connection: where to connect and its record.
pub struct Allowed {
    pub addrs: Vec<SocketAddr>,
    pub conn: Conn,
}

/// What a door's own refusal records: the audit row's reason and detail, the
/// metric's reason, and whether it ends the run.
pub(crate) struct Denial {
    pub reason: String,
    pub detail: Option<String>,
    pub metric: &'static str,
    pub end_run: bool,
}

/// The `egress.allowed` row of `run`'s connection to `resource`; a refusal
/// turns it into `egress.denied`.
pub(crate) fn audit_for(run: &RunRecord, resource: &str) -> AuditEvent {
    grant::event::for_run(run, Door::Connect.allowed_event(), CONNECT, resource)
}

/// A request as a gateway approval binds it.
pub(crate) struct Bound<'a> {
    pub method: &'a str,
    /// `HOST:PORT`.
    pub authority: &'a str,
    pub path: &'a str,
    /// The query as sent (empty: none), and whether the approval may show it
    /// (a rule with `log_query = false` keeps it out of every record: it is
    /// then bound by its SHA-256 and shown as `redacted`).
    pub query: (&'a str, bool),
    /// The headers policy reads (`name=value`).
    pub headers: &'a [String],
    pub body: &'a [u8],
}

impl Bound<'_> {
    /// A `CONNECT` to `authority`: no path, query, headers or body.
    pub fn connect(authority: &str) -> Bound<'_> {
        Bound {
            method: "CONNECT",
            authority,
            path: "",
            query: ("", true),
            headers: &[],
            body: b"",
        }
    }
}

/// What a gateway approval is bound to: the method, `host:port`, path, query,
/// the headers policy reads and the SHA-256 of the body (hex), and the body
/// itself when it is short text an approver can read. Two requests that
/// differ in any of these are two approvals.
pub(crate) fn approval_binding(action: &str, resource: &str, req: &Bound<'_>) -> Binding {
    // A placeholder is shown nowhere, an approval included: what carries one
    // is bound by its hash.
    let carries = |t: &str| placeholders_in(t).next().is_some();
    let (query, shown) = req.query;
    let shown = shown && !carries(query);
    let mut args = serde_json::json!({
        "method": req.method,
        "host": req.authority,
        "path": req.path,
        "query": if shown || query.is_empty() { query } else { "redacted" },
        "headers": req.headers,
        "body_sha256": crate::ids::sha256_hex(req.body),
    });
    if !shown && !query.is_empty() {
        args["query_sha256"] = serde_json::Value::String(crate::ids::sha256_hex(query.as_bytes()));
    }
    if req.headers.iter().any(|h| carries(h)) {
        args["headers"] = serde_json::Value::String("redacted".into());
        let joined = req.headers.join("\n");
        args["headers_sha256"] =
            serde_json::Value::String(crate::ids::sha256_hex(joined.as_bytes()));
    }
    let readable = std::str::from_utf8(req.body)
        .ok()
        .filter(|t| !t.is_empty() && t.len() <= MAX_SHOWN_BODY)
        .filter(|t| !t.chars().any(crate::names::misleads) && !carries(t));
    if let Some(text) = readable {
        args["body"] = serde_json::Value::String(text.to_owned());
    }
    Binding {
        action: action.to_owned(),
        resource: resource.to_owned(),
        arguments: Some(
            tessera_client::arguments::canonical(&args).unwrap_or_else(|_| args.to_string()),
        ),
    }
}

/// Longest body an approval shows as text (longer ones by their hash only).
const MAX_SHOWN_BODY: usize = 4096;

fn denied_to(dest: &Destination) -> String {
    format!("policy does not permit connecting to {}", dest.path())
}

/// Whether `ip` is in one of `ranges`, directly or as the IPv4 address an IPv6
/// form carries.
fn opened(ranges: &[Cidr], ip: IpAddr) -> bool {
    let embedded = match ip {
        IpAddr::V6(v6) => addresses::embedded_v4(v6).map(IpAddr::V4),
        IpAddr::V4(_) => None,
    };
    ranges
        .iter()
        .any(|r| r.contains(ip) || embedded.is_some_and(|v4| r.contains(v4)))
}

/// The first address of `addrs` in a range the run may not reach, with its range.
pub fn first_refused(addrs: &[IpAddr], opened_ranges: &[Cidr]) -> Option<(IpAddr, Range)> {
    addrs.iter().find_map(|ip| {
        addresses::classify(*ip)
            .filter(|_| !opened(opened_ranges, *ip))
            .map(|range| (*ip, range))
    })
}

impl Gateway {
    /// Decides and records one `CONNECT` of `run` to `dest`.
    pub async fn admit(
        &self,
        run: &Arc<RunRecord>,
        dest: &Destination,
    ) -> Result<Allowed, Refusal> {
        let decided = self.decide_connect(run, dest).await?;
        let authority = dest.path();
        self.connect_decided(run, dest, decided, &Bound::connect(&authority))
            .await
    }

    /// Steps 1–3 of a connection's decision: the decision layer's.
    pub(crate) async fn decide_connect(
        &self,
        run: &Arc<RunRecord>,
        dest: &Destination,
    ) -> Result<Decided, Refusal> {
        let resource = self.resource(dest);
        let ask = Ask {
            door: Door::Connect,
            run,
            action: CONNECT,
            resource: &resource,
            requested_ttl: None,
            arguments: None,
            request_id: None,
            detail: None,
            end_run_on_deny: self.config.end_run_on_deny,
        };
        grant::decide(&self.app, ask)
            .await
            .map_err(|r| self.refused(run, r, Code::DestinationDenied, || denied_to(dest)))
    }

    /// The rest of a connection's decision, for what policy allowed: the
    /// approval gate (bound to `request`: the `CONNECT`, or the one
    /// absolute-form request the connection carries), the addresses, the
    /// limits, the record.
    pub(crate) async fn connect_decided(
        &self,
        run: &Arc<RunRecord>,
        dest: &Destination,
        decided: Decided,
        request: &Bound<'_>,
    ) -> Result<Allowed, Refusal> {
        let app = &self.app;
        let denied = || denied_to(dest);
        let binding = approval_binding(CONNECT, &self.resource(dest), request);
        let mut permit = decided
            .gate(app, binding, None)
            .await
            .map_err(|r| self.refused(run, r, Code::DestinationDenied, denied))?;
        let audit = permit.decided.audit.clone();

        let ips = match &dest.host {
            Host::Ip(ip) => vec![*ip],
            Host::Name(name) => match self.resolver.lookup(name).await {
                Ok(ips) => ips,
                Err(why) => {
                    let denial = Denial {
                        reason: "unresolvable".into(),
                        detail: None,
                        metric: "dns",
                        end_run: false,
                    };
                    self.refuse(Door::Connect, run, audit, denial).await;
                    return Err(Refusal::new(Code::Unresolvable, why));
                }
            },
        };
        let listed: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
        let opened = &permit.decided.constraints.allow_addresses;
        if let Some((ip, range)) = first_refused(&ips, opened) {
            let denial = Denial {
                reason: format!("address_{}", range.as_str()),
                detail: Some(format!("addresses={} refused={ip}", listed.join(","))),
                metric: "address",
                end_run: self.config.end_run_on_deny,
            };
            self.refuse(Door::Connect, run, audit, denial).await;
            return Err(Refusal::new(
                Code::AddressRefused,
                format!(
                    "{} resolves to a {} address, which this run may not reach",
                    dest.path(),
                    range.as_str().replace('_', "-")
                ),
            ));
        }

        let now = app.clock.now();
        let traffic = self.traffic.run(&run.id, run.expires_at, now);
        let limits = Limits {
            max_up: self.config.max_bytes_up_per_run,
            max_down: self.config.max_bytes_down_per_run,
        };
        let addresses = listed.join(",");
        let mut audit = audit;
        audit.detail = Some(format!(
            "addresses={addresses} policies={}",
            permit.decided.policies.join(",")
        ));
        let conn = if Conn::exhausted(&traffic, limits) {
            Err("the run has used its byte allowance")
        } else {
            let max = self.config.max_connections_per_run;
            Conn::open(app.clone(), traffic, max, limits, audit.clone(), addresses)
                .ok_or("the run has its most connections open")
        };
        let conn = match conn {
            Ok(conn) => conn,
            Err(why) => {
                let denial = Denial {
                    reason: "limit".into(),
                    detail: None,
                    metric: "limit",
                    end_run: false,
                };
                self.refuse(Door::Connect, run, audit, denial).await;
                return Err(Refusal::new(Code::LimitReached, why));
            }
        };

        permit.decided.audit = audit;
        if let Err(r) = permit.record(app).await {
            drop(conn); // never connected: no close row
            return Err(self.refused(run, r, Code::DestinationDenied, denied));
        }
        app.metrics.egress("allow", "policy");
        let port = dest.port;
        Ok(Allowed {
            addrs: ips
                .into_iter()
                .map(|ip| SocketAddr::new(ip, port))
                .collect(),
            conn,
        })
    }

    /// The gateway's answer to a refusal of the decision layer; `denied`
    /// (with the message `why` makes) answers a policy denial. A run found
    /// ended loses its injection session and its connections here.
    pub(crate) fn refused(
        &self,
        run: &RunRecord,
        refused: Refused,
        denied: Code,
        why: impl FnOnce() -> String,
    ) -> Refusal {
        let app = &self.app;
        let cut = |gw: &Gateway| {
            app.injection.forget(&run.id);
            if let Some(t) = gw.traffic.get(&run.id) {
                t.cut_all();
            }
        };
        match refused {
            Refused::RunInactive(state) => {
                // Ended elsewhere (another replica, the sweeper).
                cut(self);
                Refusal::new(Code::RunEnded, format!("the run has {}", state.as_str()))
            }
            Refused::Inadmissible { code, message } => Refusal::new(
                Code::InvalidDestination,
                format!("{}: {message}", code.as_str()),
            ),
            Refused::Denied { end_run, .. } => {
                if end_run {
                    cut(self);
                }
                Refusal::new(denied, why())
            }
            Refused::Pending(p) => {
                app.metrics.egress("deny", "approval");
                let mut r = Refusal::new(
                    Code::ApprovalPending,
                    format!(
                        "approval {} is {}: once approvers approve it, the identical request \
                         passes once (GET /v1/approvals/{}?wait=30s with the run token tells)",
                        p.approval_id,
                        p.status.as_str(),
                        p.approval_id
                    ),
                );
                r.approval_id = Some(p.approval_id.into());
                r
            }
            Refused::Approval(a) => {
                app.metrics.egress("deny", "approval");
                match a {
                    ApprovalRefusal::DeniedBefore(id) => {
                        let mut r = Refusal::new(
                            Code::ApprovalDenied,
                            format!(
                                "approval {id} for this request was denied; a denial stands for the rest of the run"
                            ),
                        );
                        r.approval_id = Some(id);
                        r
                    }
                    ApprovalRefusal::TooMany => Refusal::new(
                        Code::LimitReached,
                        "the run has its most approvals open; wait for them before asking for more",
                    ),
                    other => Refusal::new(
                        Code::ApprovalUnavailable,
                        format!(
                            "{}: the approval was redeemed by another request, expired or was cancelled; \
                             send the request again to ask for a new one",
                            other.code().as_str()
                        ),
                    ),
                }
            }
            Refused::RateLimited { .. } => {
                app.metrics.egress("deny", "rate");
                Refusal::new(Code::LimitReached, "the run is over its rate")
            }
            Refused::Store(e) => {
                tracing::error!(error = %e, "cannot record an egress decision");
                Refusal::new(
                    Code::StoreUnavailable,
                    "the decision cannot be recorded; nothing went upstream",
                )
            }
        }
    }

    /// `net:HOST:PORT` as policy and the audit name `dest`.
    pub(super) fn resource(&self, dest: &Destination) -> String {
        format!("{}:{}", self.config.backend, dest.path())
    }

    /// Records a refusal of the gateway's own (a name that does not resolve,
    /// an address, a limit, a placeholder, a first flight that is not TLS):
    /// rate-charged and audited as `egress.denied` by the decision layer, and,
    /// when the denial says so, the run ended and its other connections cut.
    pub(crate) async fn refuse(
        &self,
        door: Door,
        run: &RunRecord,
        audit: AuditEvent,
        denial: Denial,
    ) {
        let app = &self.app;
        app.metrics.egress("deny", denial.metric);
        let destination = audit.resource.clone().unwrap_or_default();
        // The store's word (a rate, an ended run) changes nothing here: the
        // answer is this refusal either way.
        let _ = record::refuse(app, door, run, audit, &denial.reason, denial.detail).await;
        if denial.end_run {
            self.end_run(run, &destination).await;
        }
    }

    /// Ends `run` because it tried `destination`: everything it holds is
    /// revoked (downstream too, through the revocation outbox), and its open
    /// connections here are cut.
    pub async fn end_run(&self, run: &RunRecord, destination: &str) {
        tracing::warn!(run = %run.id, destination, "ending the run: it tried a destination it may not reach");
        record::end_run(&self.app, run, "gateway", "egress_denied").await;
        if let Some(t) = self.traffic.get(&run.id) {
            t.cut_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_opened_range_opens_its_addresses_in_every_spelling() {
        let loopback: Vec<Cidr> = vec!["127.0.0.0/8".parse().unwrap()];
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(first_refused(&[ip("127.0.0.1")], &loopback), None);
        assert_eq!(first_refused(&[ip("::ffff:127.0.0.1")], &loopback), None);
        assert_eq!(
            first_refused(&[ip("127.0.0.1"), ip("169.254.169.254")], &loopback),
            Some((ip("169.254.169.254"), Range::LinkLocal)),
            "one refused address refuses the name"
        );
        assert_eq!(
            first_refused(&[ip("::1")], &loopback),
            Some((ip("::1"), Range::Loopback)),
            "127.0.0.0/8 does not open ::1"
        );
        assert_eq!(first_refused(&[ip("8.8.8.8")], &[]), None);
        assert_eq!(
            first_refused(&[ip("10.1.2.3")], &[]),
            Some((ip("10.1.2.3"), Range::Private))
        );
    }

    fn bound<'a>(
        method: &'a str,
        authority: &'a str,
        path: &'a str,
        query: &'a str,
        headers: &'a [String],
        body: &'a [u8],
    ) -> Bound<'a> {
        Bound {
            method,
            authority,
            path,
            query: (query, true),
            headers,
            body,
        }
    }

    fn arguments(b: &Bound<'_>) -> serde_json::Value {
        let binding = approval_binding("POST", "api:/a", b);
        serde_json::from_str(binding.arguments.as_deref().unwrap()).unwrap()
    }

    #[test]
    fn an_approval_is_bound_to_every_part_of_the_request() {
        let json = ["content-type=application/json".to_owned()];
        let text = ["content-type=text/plain".to_owned()];
        let base = arguments(&bound("POST", "h.test:443", "/a", "x=1", &json, b"{}"));
        let differ = [
            bound("PUT", "h.test:443", "/a", "x=1", &json, b"{}"),
            bound("POST", "h.test:444", "/a", "x=1", &json, b"{}"),
            bound("POST", "h.test:443", "/b", "x=1", &json, b"{}"),
            bound("POST", "h.test:443", "/a", "x=2", &json, b"{}"),
            bound("POST", "h.test:443", "/a", "x=1", &text, b"{}"),
            bound("POST", "h.test:443", "/a", "x=1", &json, b"{ }"),
            Bound::connect("h.test:443"),
        ];
        for other in differ {
            assert_ne!(base, arguments(&other));
        }
        assert_eq!(
            base,
            arguments(&bound("POST", "h.test:443", "/a", "x=1", &json, b"{}"))
        );
        let long = vec![b'a'; MAX_SHOWN_BODY + 1];
        let v = arguments(&bound("POST", "h", "/a", "", &[], &long));
        assert!(v.get("body").is_none(), "{v}");
        assert_eq!(v["body_sha256"], crate::ids::sha256_hex(&long));
        let v = arguments(&bound("POST", "h", "/a", "", &[], "a\u{202e}b".as_bytes()));
        assert!(
            v.get("body").is_none(),
            "what misleads is shown by hash only: {v}"
        );
    }

    #[test]
    fn a_query_kept_out_of_records_is_bound_by_its_hash() {
        let hidden = |q| Bound {
            query: (q, false),
            ..bound("GET", "h.test:443", "/a", "", &[], b"")
        };
        let v = arguments(&hidden("token=sekrit"));
        assert_eq!(v["query"], "redacted", "{v}");
        assert_eq!(v["query_sha256"], crate::ids::sha256_hex(b"token=sekrit"));
        assert!(!v.to_string().contains("sekrit"), "{v}");
        assert_ne!(v, arguments(&hidden("token=sekrit2")));
    }

    #[test]
    fn a_placeholder_is_bound_by_hash_and_never_shown() {
        let ph = format!("tsr_ph_{}", "a".repeat(43));
        let header = [format!("x-api-key={ph}")];
        let query = format!("key={ph}");
        let body = format!("{{\"key\": \"{ph}\"}}");
        let v = arguments(&bound(
            "POST",
            "h:443",
            "/a",
            &query,
            &header,
            body.as_bytes(),
        ));
        assert!(!v.to_string().contains(&ph), "{v}");
        assert_eq!(
            (v["query"].as_str(), v["headers"].as_str()),
            (Some("redacted"), Some("redacted"))
        );
        assert!(
            v.get("body").is_none() && v.get("headers_sha256").is_some(),
            "{v}"
        );
        let other = [format!("x-api-key=tsr_ph_{}", "b".repeat(43))];
        let w = arguments(&bound(
            "POST",
            "h:443",
            "/a",
            &query,
            &other,
            body.as_bytes(),
        ));
        assert_ne!(v, w, "another placeholder is another request");
    }
}
