//! What a `net` backend accepts: the action `connect` and a destination
//! `HOST:PORT`, the resource the egress gateway puts to policy for every
//! connection (`net:api.github.com:443`).
//!
//! Why this strict: policy matches destinations as text (`resource.path like
//! "*.github.com:443"`), so a destination must have exactly one spelling, or a
//! second spelling of a forbidden host walks around its forbid. So: host names
//! are lower-case LDH labels without a trailing dot (the gateway lower-cases
//! and strips the root dot of what a client sends before asking), IPv4 literals
//! are the dotted quad without leading zeros, IPv6 literals are bracketed and in
//! the one form RFC 5952 prescribes, an IPv4-mapped IPv6 address
//! (`::ffff:a.b.c.d`) is written as the IPv4 address it is, and a port is
//! decimal without leading zeros. A name whose last label is all digits is refused: resolvers read
//! `127.1` as an address.
//!
//! Wildcards (policy patterns, case files): `*` as the whole leftmost label
//! (`*.github.com`) and `*` as the whole port. The gateway itself only ever asks
//! for concrete destinations.

use crate::backends::grammar::{is_allowed, Invalid};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `*` stands for a leftmost label or a port.
pub const WILDCARDS: &[char] = &['*'];

/// A permit for `*.example.com:443` grants the set `*.api.example.com:443`.
pub const INCLUSION_GRANTS: bool = true;

/// The one action of the kind.
pub const CONNECT: &str = "connect";

/// The host part of a destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A lower-case DNS name without the root dot.
    Name(String),
    /// An address literal.
    Ip(IpAddr),
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V4(v4)) => write!(f, "{v4}"),
            Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
        }
    }
}

/// A concrete destination, in its one spelling ([`Destination::path`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub host: Host,
    pub port: u16,
}

impl Destination {
    /// `HOST:PORT` as policy sees it.
    pub fn path(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

fn is_label(l: &str, wildcard: bool) -> bool {
    if wildcard && l == "*" {
        return true;
    }
    (1..=63).contains(&l.len())
        && l.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !l.starts_with('-')
        && !l.ends_with('-')
}

fn is_name(s: &str, wildcard: bool) -> bool {
    let labels: Vec<&str> = s.split('.').collect();
    s.len() <= 253
        && labels
            .iter()
            .enumerate()
            .all(|(i, l)| is_label(l, wildcard && i == 0 && labels.len() > 1))
        && labels
            .last()
            .is_some_and(|l| !l.bytes().all(|c| c.is_ascii_digit()))
}

fn parse_host(s: &str, wildcard: bool) -> Option<Host> {
    if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        let v6: Ipv6Addr = inner.parse().ok()?;
        return (v6.to_string() == inner && v6.to_ipv4_mapped().is_none())
            .then_some(Host::Ip(IpAddr::V6(v6)));
    }
    if s.bytes().all(|c| c.is_ascii_digit() || c == b'.') {
        let v4: Ipv4Addr = s.parse().ok()?;
        return (v4.to_string() == s).then_some(Host::Ip(IpAddr::V4(v4)));
    }
    is_name(s, wildcard).then(|| Host::Name(s.to_owned()))
}

fn parse_port(s: &str) -> Option<u16> {
    if s.is_empty() || s.len() > 5 || s.starts_with('0') || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|p| *p > 0)
}

/// A concrete `HOST:PORT` in its one spelling, or `None`.
pub fn parse_destination(path: &str) -> Option<Destination> {
    let (host, port) = path.rsplit_once(':')?;
    Some(Destination {
        host: parse_host(host, false)?,
        port: parse_port(port)?,
    })
}

/// Whether `path` is a destination or a pattern of them (`*.example.com:*`).
pub fn is_path(path: &str) -> bool {
    let Some((host, port)) = path.rsplit_once(':') else {
        return false;
    };
    parse_host(host, true).is_some() && (port == "*" || parse_port(port).is_some())
}

/// What a client asked for (`CONNECT Host:443`, `http://Host./`) in the one
/// spelling: lower case, no root dot, an IPv6 literal in brackets.
pub fn normalise(host: &str, port: u16) -> Option<Destination> {
    let host = host.strip_suffix('.').unwrap_or(host);
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_ascii_lowercase()
    };
    let host = match host.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        // An IPv6 literal is spelled canonically here (the grammar then holds
        // it); a mapped IPv4 address is that IPv4 address, so a forbid written
        // for `169.254.169.254:*` holds for `[::ffff:169.254.169.254]` too.
        Some(inner) => {
            let v6: Ipv6Addr = inner.parse().ok()?;
            match v6.to_ipv4_mapped() {
                Some(v4) => Host::Ip(IpAddr::V4(v4)),
                None => Host::Ip(IpAddr::V6(v6)),
            }
        }
        None => parse_host(&host, false)?,
    };
    (port > 0).then_some(Destination { host, port })
}

/// A request's path and action (`connect` only), then the allow-list.
pub fn check_resource(
    path: &str,
    action: &str,
    allow_list: Option<&[String]>,
) -> Result<(), Invalid> {
    if path.len() > 260 || !is_path(path) {
        return Err(Invalid::Path);
    }
    if action != CONNECT || !is_allowed(allow_list, action) {
        return Err(Invalid::Action);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn one_spelling_per_destination() {
        for ok in [
            "api.github.com:443",
            "localhost:80",
            "127.0.0.1:8080",
            "[::1]:443",
            "[fd00:ec2::254]:80",
            "x-1.example:65535",
        ] {
            assert!(parse_destination(ok).is_some(), "{ok}");
            assert_eq!(parse_destination(ok).unwrap().path(), ok);
        }
        for bad in [
            "API.github.com:443",
            "api.github.com.:443",
            "api.github.com:0443",
            "api.github.com:0",
            "api.github.com:65536",
            "api.github.com",
            "127.0.0.01:80",
            "127.1:80",
            "0x7f.0.0.1:80",
            "2130706433:80",
            "[::FFFF:127.0.0.1]:80",
            "[::ffff:127.0.0.1]:80",
            "[0:0:0:0:0:0:0:1]:80",
            "::1:80",
            "-a.example:80",
            "a..example:80",
            "*.example.com:443",
            "example.com:*",
            "ex ample.com:80",
            "exämple.com:80",
            "a_b.example:80",
        ] {
            assert!(parse_destination(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn patterns_have_wildcards_only_as_a_whole_label_or_port() {
        for ok in ["*.github.com:443", "*.github.com:*", "github.com:*"] {
            assert!(is_path(ok), "{ok}");
        }
        for bad in [
            "*:443",
            "a*.github.com:443",
            "github.*.com:443",
            "*.*.com:443",
        ] {
            assert!(!is_path(bad), "{bad}");
        }
    }

    #[test]
    fn what_a_client_sends_is_normalised_to_the_one_spelling() {
        let n = |h: &str, p| normalise(h, p).map(|d| d.path());
        assert_eq!(
            n("API.GitHub.com.", 443).as_deref(),
            Some("api.github.com:443")
        );
        assert_eq!(n("[::FFFF:127.0.0.1]", 80).as_deref(), Some("127.0.0.1:80"));
        assert_eq!(
            n("::ffff:a9fe:a9fe", 80).as_deref(),
            Some("169.254.169.254:80")
        );
        assert_eq!(n("0:0:0:0:0:0:0:1", 80).as_deref(), Some("[::1]:80"));
        assert_eq!(n("127.1", 80), None);
        assert_eq!(n("127.000.0.1", 80), None);
        assert_eq!(n("a b", 80), None);
        assert_eq!(n("example.com", 0), None);
    }

    proptest! {
        /// Whatever a client sends, what is asked of policy is in the grammar,
        /// and parsing it again gives the same destination.
        #[test]
        fn normalised_destinations_are_in_the_grammar(host in ".{0,80}", port in any::<u16>()) {
            if let Some(d) = normalise(&host, port) {
                let path = d.path();
                prop_assert_eq!(parse_destination(&path), Some(d));
                prop_assert!(check_resource(&path, CONNECT, None).is_ok());
            }
        }
    }
}
