//! `[http]`: the bounds of the HTTP edge (both listeners, plain and TLS).
//!
//! Why each exists: a client that opens a connection and sends half a request
//! holds a file descriptor for as long as the server lets it; without a
//! header-read timeout and a connection cap, about a thousand such sockets
//! exhaust a default descriptor limit and nobody else gets an answer. The
//! defaults are safe for a broker on one machine; every value is a setting.

use super::{duration_setting, err, ConfigError};
use serde::Deserialize;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    header_read_timeout: Option<String>,
    idle_timeout: Option<String>,
    request_timeout: Option<String>,
    max_connections: Option<u32>,
    h2c: Option<bool>,
    allowed_hosts: Option<Vec<String>>,
}

/// Which `Host` (or HTTP/2 `:authority`) values are answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedHosts {
    /// Any host (the default unless listening on loopback).
    Any,
    /// The loopback names with the port actually bound (`127.0.0.1:P`,
    /// `localhost:P`, `[::1]:P`): the default on a loopback listener, so a
    /// web page that rebinds its own name to 127.0.0.1 cannot read the broker.
    Loopback,
    /// These names (compared case-insensitively): `host:port` matches that
    /// port only, a bare `host` any port.
    List(Vec<String>),
}

#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Longest a client may take to complete the TLS handshake, to send its
    /// first request, and (HTTP/1) to send each request head.
    pub header_read_timeout: Duration,
    /// A connection with no request in flight, and none started or ended, for
    /// this long is closed (counted in requests: frames alone do not count).
    pub idle_timeout: Duration,
    /// Longest a request may take, body included, before a 503 `request_timeout`.
    pub request_timeout: Duration,
    /// Open connections at most; `None`: derived from the descriptor limit at start.
    pub max_connections: Option<u32>,
    /// Whether the plain listener speaks HTTP/2 without TLS (h2c).
    pub h2c: bool,
    pub allowed_hosts: AllowedHosts,
    /// Descriptors the store and backend pools may hold (not a setting:
    /// derived from their sizes), kept out of the derived connection cap.
    pub reserved_fds: u64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(30),
            max_connections: None,
            h2c: false,
            allowed_hosts: AllowedHosts::Any,
            reserved_fds: 0,
        }
    }
}

fn bounded(
    setting: &str,
    v: &Option<String>,
    default: Duration,
    max: Duration,
) -> Result<Duration, ConfigError> {
    let d = duration_setting(setting, v, default)?;
    if d < Duration::from_secs(1) || d > max {
        return Err(err(
            setting,
            format!("must be between 1s and {}s", max.as_secs()),
        ));
    }
    Ok(d)
}

pub(super) fn resolve(raw: RawHttp, listen: SocketAddr) -> Result<HttpConfig, ConfigError> {
    let d = HttpConfig::default();
    let header_read_timeout = bounded(
        "http.header_read_timeout",
        &raw.header_read_timeout,
        d.header_read_timeout,
        Duration::from_secs(300),
    )?;
    let request_timeout = bounded(
        "http.request_timeout",
        &raw.request_timeout,
        d.request_timeout,
        Duration::from_secs(600),
    )?;
    let idle_timeout = bounded(
        "http.idle_timeout",
        &raw.idle_timeout,
        d.idle_timeout,
        Duration::from_secs(3600),
    )?;
    if idle_timeout <= request_timeout {
        // A connection is kept at least as long as one of its requests may
        // take: a client told "idle" before its own request could time out
        // would see a limit shorter than the one configured.
        return Err(err(
            "http.idle_timeout",
            "must be longer than http.request_timeout",
        ));
    }
    if let Some(n) = raw.max_connections {
        if !(16..=1_000_000).contains(&n) {
            return Err(err(
                "http.max_connections",
                "must be between 16 and 1000000",
            ));
        }
    }
    let allowed_hosts = match raw.allowed_hosts {
        None if listen.ip().is_loopback() => AllowedHosts::Loopback,
        None => AllowedHosts::Any,
        Some(list) if list.iter().any(|h| h == "*") => {
            if list.len() > 1 {
                return Err(err("http.allowed_hosts", "\"*\" stands alone"));
            }
            AllowedHosts::Any
        }
        Some(list) => {
            if list.is_empty() {
                return Err(err(
                    "http.allowed_hosts",
                    "empty: list the names clients use, or [\"*\"] for any",
                ));
            }
            for h in &list {
                if h.is_empty() || h.len() > 255 || !h.chars().all(|c| c.is_ascii_graphic()) {
                    return Err(err(
                        "http.allowed_hosts",
                        format!("not a host or host:port: {h:?}"),
                    ));
                }
            }
            AllowedHosts::List(list.into_iter().map(|h| h.to_ascii_lowercase()).collect())
        }
    };
    Ok(HttpConfig {
        header_read_timeout,
        idle_timeout,
        request_timeout,
        max_connections: raw.max_connections,
        h2c: raw.h2c.unwrap_or(false),
        allowed_hosts,
        reserved_fds: 0,
    })
}

impl AllowedHosts {
    /// Whether a request naming `host` (its `Host` header or `:authority`)
    /// is answered by a listener bound to `local`.
    pub fn allows(&self, host: &str, local: SocketAddr) -> bool {
        // Runs per request: no allocation, names compared without case
        // (the configured list is stored lower-cased).
        match self {
            AllowedHosts::Any => true,
            AllowedHosts::Loopback => {
                // `name:port`, the name one of the loopback spellings and the
                // port the bound one.
                let Some((name, port)) = host.rsplit_once(':') else {
                    return false;
                };
                ["127.0.0.1", "localhost", "[::1]"]
                    .iter()
                    .any(|n| name.eq_ignore_ascii_case(n))
                    && port.parse::<u16>().ok() == Some(local.port())
                    && !port.starts_with('+')
            }
            AllowedHosts::List(list) => {
                let name = host_name(host);
                list.iter().any(|h| {
                    h.eq_ignore_ascii_case(host)
                        || (host_name(h) == h.as_str() && h.eq_ignore_ascii_case(name))
                })
            }
        }
    }
}

/// `host` without its port (`[::1]:8700` → `[::1]`, `a.b:1` → `a.b`).
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> SocketAddr {
        "127.0.0.1:8700".parse().unwrap()
    }

    #[test]
    fn loopback_listener_answers_only_loopback_names_with_its_port() {
        let http = resolve(RawHttp::default(), local()).unwrap();
        assert_eq!(http.allowed_hosts, AllowedHosts::Loopback);
        for ok in ["127.0.0.1:8700", "LOCALHOST:8700", "[::1]:8700"] {
            assert!(http.allowed_hosts.allows(ok, local()), "{ok}");
        }
        for bad in [
            "attacker.example",
            "attacker.example:8700",
            "127.0.0.1",
            "127.0.0.1:80",
            "localhost.attacker.example:8700",
            "",
        ] {
            assert!(!http.allowed_hosts.allows(bad, local()), "{bad}");
        }
        let any = resolve(RawHttp::default(), "0.0.0.0:8700".parse().unwrap()).unwrap();
        assert_eq!(any.allowed_hosts, AllowedHosts::Any);
    }

    #[test]
    fn settings_are_checked() {
        let raw = |f: fn(&mut RawHttp)| {
            let mut r = RawHttp::default();
            f(&mut r);
            resolve(r, local())
        };
        assert!(raw(|r| r.idle_timeout = Some("10s".into())).is_err());
        assert!(raw(|r| r.header_read_timeout = Some("0s".into())).is_err());
        assert!(raw(|r| r.max_connections = Some(3)).is_err());
        assert!(raw(|r| r.allowed_hosts = Some(vec![])).is_err());
        assert!(raw(|r| r.allowed_hosts = Some(vec!["*".into(), "a".into()])).is_err());
        assert!(raw(|r| r.allowed_hosts = Some(vec!["a b".into()])).is_err());
        let list =
            raw(|r| r.allowed_hosts = Some(vec!["Broker.Internal:8700".into(), "[::1]".into()]))
                .unwrap();
        assert!(list.allowed_hosts.allows("broker.internal:8700", local()));
        assert!(!list.allowed_hosts.allows("broker.internal:8701", local()));
        assert!(!list.allowed_hosts.allows("broker.internal", local()));
        assert!(list.allowed_hosts.allows("[::1]:9", local()));
        assert!(list.allowed_hosts.allows("[::1]", local()));
        assert!(!list.allowed_hosts.allows("127.0.0.1:8700", local()));
    }
}
