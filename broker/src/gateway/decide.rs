//! One decision per connection, in this order, each step able to refuse and
//! none connecting anything:
//!
//! 1. the run is active (the store re-checks it when the decision is recorded);
//! 2. the destination is in the `net` grammar and `connect` is declared;
//! 3. Cedar decides `connect` on `net:HOST:PORT` (a forbid wins; default deny; a
//!    permit that needs `@approval` refuses: a connection cannot wait for one);
//! 4. the name is resolved once, by the gateway, and **every** address it has is
//!    classified (`addresses`): a non-public one is refused unless a satisfied
//!    permit's `@allow_addresses` contains it;
//! 5. the run's open-connection and byte allowances are checked;
//! 6. the decision is recorded (rate-charged like a capability request, audited
//!    as `egress.allowed`) and only after its commit may the caller connect — to
//!    the addresses returned here, never to a second lookup's.
//!
//! A refusal at 3 or 4 is audited as `egress.denied` and ends the run when
//! `gateway.end_run_on_deny` or the forbid's `@on_deny("end_run")` says so.

use super::addresses::{self, Range};
use super::refusal::{Code, Refusal};
use super::traffic::{Conn, Limits};
use super::Gateway;
use crate::api::capabilities::{rate_charge, server_rate};
use crate::audit::{events, AuditEvent};
use crate::backends::net::cidr::Cidr;
use crate::backends::net::grammar::{Destination, Host, CONNECT};
use crate::policy::{admit, PolicyDecision};
use crate::store::capabilities::{IssueCapability, IssueOutcome};
use crate::store::runs::{EndRun, RunRecord, RunState};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// A permitted, recorded connection: where to connect and its record.
pub struct Allowed {
    pub addrs: Vec<SocketAddr>,
    pub conn: Conn,
}

/// What a refusal records: the audit row's reason and detail, the metric's
/// reason, and whether it ends the run.
pub(crate) struct Denial {
    pub reason: String,
    pub detail: Option<String>,
    pub metric: &'static str,
    pub end_run: bool,
}

/// The `egress.allowed` row of `run`'s connection to `resource`; a refusal
/// turns it into `egress.denied`.
pub(crate) fn audit_for(run: &RunRecord, resource: &str) -> AuditEvent {
    let mut ev = AuditEvent::new(events::EGRESS_ALLOWED, format!("run:{}", run.id), "allow");
    ev.run_id = Some(run.id.clone());
    ev.user = Some(run.user.clone());
    ev.task_id = Some(run.task_id.clone());
    ev.action = Some(CONNECT.to_owned());
    ev.resource = Some(resource.to_owned());
    ev
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
    /// Decides and records one connection of `run` to `dest`.
    pub async fn decide(
        &self,
        run: &Arc<RunRecord>,
        dest: &Destination,
    ) -> Result<Allowed, Refusal> {
        let app = &self.app;
        let now = app.clock.now();
        let state = run.state(now);
        if state != RunState::Active {
            return Err(Refusal::new(
                Code::RunEnded,
                format!("the run has {}", state.as_str()),
            ));
        }
        let resource = self.resource(dest);
        let mut audit = audit_for(run, &resource);
        let policy = app.policy();
        let res = admit::check_capability(&policy, &app.config.backends, CONNECT, &resource)
            .map_err(|r| {
                Refusal::new(
                    Code::InvalidDestination,
                    format!("{}: {}", r.code.as_str(), r.message),
                )
            })?;
        let request = crate::reauthorize::policy_request(run, CONNECT, &res, None, now, None);
        let (policies, constraints) = match policy.decide(&request) {
            PolicyDecision::Deny { rule, policies, .. } => {
                let denial = Denial {
                    reason: rule.reason().to_owned(),
                    detail: Some(format!("policies={}", policies.join(","))),
                    metric: "policy",
                    end_run: self.config.end_run_on_deny || policy.ends_run_on_deny(&policies),
                };
                self.refuse(run, audit, denial).await;
                return Err(Refusal::new(
                    Code::DestinationDenied,
                    format!("policy does not permit connecting to {}", dest.path()),
                ));
            }
            PolicyDecision::Allow {
                policies,
                constraints,
            } => (policies, constraints),
        };
        if constraints.approval.is_some() {
            // A permit that needs a human's approval does not hold until one is
            // given, and a connection cannot wait for it.
            let denial = Denial {
                reason: "approval_required".into(),
                detail: Some(format!("policies={}", policies.join(","))),
                metric: "policy",
                end_run: false,
            };
            self.refuse(run, audit, denial).await;
            return Err(Refusal::new(
                Code::DestinationDenied,
                format!(
                    "connecting to {} needs a human approval, which the gateway cannot wait for",
                    dest.path()
                ),
            ));
        }

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
                    self.refuse(run, audit, denial).await;
                    return Err(Refusal::new(Code::Unresolvable, why));
                }
            },
        };
        let listed: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
        if let Some((ip, range)) = first_refused(&ips, &constraints.allow_addresses) {
            let denial = Denial {
                reason: format!("address_{}", range.as_str()),
                detail: Some(format!("addresses={} refused={ip}", listed.join(","))),
                metric: "address",
                end_run: self.config.end_run_on_deny,
            };
            self.refuse(run, audit, denial).await;
            return Err(Refusal::new(
                Code::AddressRefused,
                format!(
                    "{} resolves to a {} address, which this run may not reach",
                    dest.path(),
                    range.as_str().replace('_', "-")
                ),
            ));
        }

        let traffic = self.traffic.run(&run.id, run.expires_at, now);
        let limits = Limits {
            max_up: self.config.max_bytes_up_per_run,
            max_down: self.config.max_bytes_down_per_run,
        };
        let addresses = listed.join(",");
        audit.detail = Some(format!(
            "addresses={addresses} policies={}",
            policies.join(",")
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
                self.refuse(run, audit, denial).await;
                return Err(Refusal::new(Code::LimitReached, why));
            }
        };

        if let Err(refusal) = self
            .record_allowed(run, audit, constraints.rate.as_ref())
            .await
        {
            drop(conn); // never connected: no close row
            return Err(refusal);
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

    /// Records an allowed decision (a connection, an injected request) before
    /// anything goes upstream: rate-charged like a capability request (the
    /// server's rate and the permit's `@rate`), audited, committed. A run the
    /// store finds ended loses its injection session and its connections here.
    pub(crate) async fn record_allowed(
        &self,
        run: &RunRecord,
        audit: AuditEvent,
        policy_rate: Option<&(crate::grammar::Rate, String)>,
    ) -> Result<(), Refusal> {
        let app = &self.app;
        let mut rate = vec![server_rate(app, run)];
        if let Some((r, policy_id)) = policy_rate {
            rate.push(rate_charge(format!("run:{}:policy:{policy_id}", run.id), r));
        }
        let op = IssueCapability {
            record: None,
            rate,
            audit: Arc::new(audit),
        };
        match app.store.writer().record_issuance(op).await {
            Ok(IssueOutcome::Denied) => Ok(()),
            Ok(IssueOutcome::RunInactive(state)) => {
                // Ended elsewhere (another replica, the sweeper).
                app.injection.forget(&run.id);
                if let Some(t) = self.traffic.get(&run.id) {
                    t.cut_all();
                }
                Err(Refusal::new(
                    Code::RunEnded,
                    format!("the run has {}", state.as_str()),
                ))
            }
            Ok(_) => {
                app.metrics.egress("deny", "rate");
                Err(Refusal::new(Code::LimitReached, "the run is over its rate"))
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot record an egress decision");
                Err(Refusal::new(
                    Code::StoreUnavailable,
                    "the decision cannot be recorded; nothing went upstream",
                ))
            }
        }
    }

    /// `net:HOST:PORT` as policy and the audit name `dest`.
    pub(super) fn resource(&self, dest: &Destination) -> String {
        format!("{}:{}", self.config.backend, dest.path())
    }

    /// Records a refusal of what `audit` describes (rate-charged and audited
    /// as `egress.denied`, like a refused capability) and, when the denial
    /// says so, ends the run and cuts its other connections.
    pub(crate) async fn refuse(&self, run: &RunRecord, mut audit: AuditEvent, denial: Denial) {
        let app = &self.app;
        app.metrics.egress("deny", denial.metric);
        audit.event = events::EGRESS_DENIED;
        audit.decision = "deny";
        audit.reason = Some(denial.reason);
        if denial.detail.is_some() {
            audit.detail = denial.detail;
        }
        let destination = audit.resource.clone().unwrap_or_default();
        let op = IssueCapability {
            record: None,
            rate: vec![server_rate(app, run)],
            audit: Arc::new(audit),
        };
        let recorded = app.store.writer().record_issuance(op).await;
        if let Err(e) = &recorded {
            tracing::error!(error = %e, "cannot record an egress refusal");
        }
        if denial.end_run {
            self.end_run(run, &destination).await;
        }
    }

    /// Ends `run` because it tried `destination`: everything it holds is
    /// revoked (downstream too, through the revocation outbox), and its open
    /// connections here are cut.
    pub async fn end_run(&self, run: &RunRecord, destination: &str) {
        let app = &self.app;
        let mut audit = AuditEvent::new(events::RUN_ENDED, "gateway", "allow");
        audit.run_id = Some(run.id.clone());
        audit.reason = Some("egress_denied".into());
        let end = EndRun {
            run_id: run.id.clone(),
            runtime_id: None,
            reason: "egress_denied",
            audit,
        };
        match app.store.writer().submit(end).await {
            Ok(_) => {
                tracing::warn!(run = %run.id, destination, "run ended: it tried a destination it may not reach");
                app.revocation_wakeup.notify_one();
            }
            Err(e) => {
                tracing::error!(error = %e, run = %run.id, "cannot end the run after an egress refusal")
            }
        }
        self.app.injection.forget(&run.id);
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
}
