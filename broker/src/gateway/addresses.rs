//! Which IP addresses a sandbox may never be connected to, whatever name led
//! there: the first building block of the egress gateway (issue 17).
//!
//! Why a table of ranges rather than `Ipv4Addr::is_private` and friends: the
//! standard library's predicates leave out ranges that matter here (CGNAT,
//! benchmarking, the IETF block, reserved space), several are unstable, and
//! none looks inside the IPv6 forms that carry an IPv4 address. A name that
//! resolves to `::ffff:127.0.0.1`, `64:ff9b::a9fe:a9fe` (NAT64 of
//! 169.254.169.254) or `2002:0a00:0001::` (6to4 of 10.0.0.1) reaches the same
//! place as the IPv4 address inside it, so those forms are classified by what
//! they embed. Tunnels that hide their endpoint (Teredo) are refused outright.
//!
//! Invariant: [`classify`] returns `None` only for addresses IANA lists as
//! globally reachable unicast; an IPv6 form that embeds an IPv4 address is
//! classified as that address (tested for every embedding, for all IPv4
//! addresses sampled by a property test).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A range that is not the public internet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Range {
    /// `0.0.0.0/8`, `::/128`.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918: `10/8`, `172.16/12`, `192.168/16`.
    Private,
    /// RFC 6598 carrier-grade NAT: `100.64.0.0/10`.
    SharedCgnat,
    /// `169.254.0.0/16` (cloud metadata at 169.254.169.254), `fe80::/10`.
    LinkLocal,
    /// RFC 4193 unique local `fc00::/7` (AWS metadata at `fd00:ec2::254`).
    UniqueLocal,
    /// `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`.
    Documentation,
    /// RFC 2544: `198.18.0.0/15`.
    Benchmarking,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `240.0.0.0/4` with the broadcast address, `192.0.0.0/24`, `192.88.99.0/24`,
    /// and in IPv6 discard-only, site-local, ORCHID and local-use NAT64 space.
    Reserved,
    /// Teredo `2001::/32`: a tunnel whose IPv4 endpoint is obfuscated.
    Tunnel,
    /// A cloud's host endpoint at a public-looking address: Azure's WireServer
    /// `168.63.129.16` (instance metadata, certificates, health).
    CloudMetadata,
}

impl Range {
    /// The name used in audit rows and refusals.
    pub fn as_str(self) -> &'static str {
        match self {
            Range::Unspecified => "unspecified",
            Range::Loopback => "loopback",
            Range::Private => "private",
            Range::SharedCgnat => "cgnat",
            Range::LinkLocal => "link_local",
            Range::UniqueLocal => "unique_local",
            Range::Documentation => "documentation",
            Range::Benchmarking => "benchmarking",
            Range::Multicast => "multicast",
            Range::Reserved => "reserved",
            Range::Tunnel => "tunnel",
            Range::CloudMetadata => "cloud_metadata",
        }
    }
}

/// The non-public range `ip` is in, or `None` for a globally reachable address.
pub fn classify(ip: IpAddr) -> Option<Range> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], bits: u32) -> bool {
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn classify_v4(ip: Ipv4Addr) -> Option<Range> {
    const TABLE: &[([u8; 4], u32, Range)] = &[
        ([0, 0, 0, 0], 8, Range::Unspecified),
        ([10, 0, 0, 0], 8, Range::Private),
        ([100, 64, 0, 0], 10, Range::SharedCgnat),
        ([127, 0, 0, 0], 8, Range::Loopback),
        ([168, 63, 129, 16], 32, Range::CloudMetadata),
        ([169, 254, 0, 0], 16, Range::LinkLocal),
        ([172, 16, 0, 0], 12, Range::Private),
        ([192, 0, 0, 0], 24, Range::Reserved),
        ([192, 0, 2, 0], 24, Range::Documentation),
        ([192, 88, 99, 0], 24, Range::Reserved),
        ([192, 168, 0, 0], 16, Range::Private),
        ([198, 18, 0, 0], 15, Range::Benchmarking),
        ([198, 51, 100, 0], 24, Range::Documentation),
        ([203, 0, 113, 0], 24, Range::Documentation),
        ([224, 0, 0, 0], 4, Range::Multicast),
        ([240, 0, 0, 0], 4, Range::Reserved),
    ];
    TABLE
        .iter()
        .find(|(net, bits, _)| in_v4(ip, *net, *bits))
        .map(|(_, _, r)| *r)
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, bits: u32) -> bool {
    let mask = if bits == 0 {
        0
    } else {
        u128::MAX << (128 - bits)
    };
    u128::from(ip) & mask == u128::from(net) & mask
}

/// The IPv4 address an IPv6 form carries, where reaching the IPv6 address
/// reaches the IPv4 one: mapped, compatible, NAT64 (RFC 6052) and 6to4.
pub fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(ip);
    let low32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    let net = |s: &str| s.parse::<Ipv6Addr>().ok();
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    if bits >> 32 == 0 && bits > 1 {
        // IPv4-compatible (::a.b.c.d, deprecated); `::` and `::1` are their own.
        return Some(low32);
    }
    if net("64:ff9b::").is_some_and(|n| in_v6(ip, n, 96)) {
        return Some(low32);
    }
    if net("2002::").is_some_and(|n| in_v6(ip, n, 16)) {
        return Some(Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32));
    }
    None
}

fn classify_v6(ip: Ipv6Addr) -> Option<Range> {
    if ip.is_unspecified() {
        return Some(Range::Unspecified);
    }
    if ip.is_loopback() {
        return Some(Range::Loopback);
    }
    if let Some(v4) = embedded_v4(ip) {
        return classify_v4(v4);
    }
    const TABLE: &[(&str, u32, Range)] = &[
        ("64:ff9b:1::", 48, Range::Reserved),
        ("100::", 64, Range::Reserved),
        ("2001::", 32, Range::Tunnel),
        ("2001:10::", 28, Range::Reserved),
        ("2001:20::", 28, Range::Reserved),
        ("2001:db8::", 32, Range::Documentation),
        ("fc00::", 7, Range::UniqueLocal),
        ("fe80::", 10, Range::LinkLocal),
        ("fec0::", 10, Range::Reserved),
        ("ff00::", 8, Range::Multicast),
    ];
    TABLE
        .iter()
        .find(|(net, bits, _)| net.parse().is_ok_and(|n| in_v6(ip, n, *bits)))
        .map(|(_, _, r)| *r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn c(s: &str) -> Option<&'static str> {
        classify(s.parse().unwrap()).map(Range::as_str)
    }

    #[test]
    fn the_addresses_a_sandbox_must_never_reach() {
        for (ip, want) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("169.254.169.254", "link_local"),
            ("168.63.129.16", "cloud_metadata"),
            ("::ffff:168.63.129.16", "cloud_metadata"),
            ("64:ff9b::a9fe:a9fe", "link_local"),
            ("fd00:ec2::254", "unique_local"),
            ("10.1.2.3", "private"),
            ("2002:0a00:0001::", "private"),
            ("::10.0.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.100.100.200", "cgnat"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("255.255.255.255", "reserved"),
            ("224.0.0.251", "multicast"),
            ("ff02::fb", "multicast"),
            ("fe80::1", "link_local"),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "tunnel"),
            ("198.18.0.1", "benchmarking"),
            ("192.0.0.192", "reserved"),
            ("2001:db8::1", "documentation"),
        ] {
            assert_eq!(c(ip), Some(want), "{ip}");
        }
    }

    #[test]
    fn public_addresses_are_public() {
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "169.255.0.1",
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
            "64:ff9b::808:808",
            "2002:0808:0808::",
        ] {
            assert_eq!(c(ip), None, "{ip}");
        }
    }

    proptest! {
        /// Every IPv6 form that carries an IPv4 address is classified as that
        /// address: no spelling reaches 127.0.0.1 or 169.254.169.254 by another way.
        #[test]
        fn an_embedded_ipv4_address_is_classified_as_itself(raw in any::<u32>(), tail in any::<u16>()) {
            let v4 = Ipv4Addr::from(raw);
            let want = classify_v4(v4);
            let bits = u128::from(raw);
            let forms = [
                v4.to_ipv6_mapped(),
                Ipv6Addr::from((0x0064_ff9b_u128 << 96) | bits),
                Ipv6Addr::from((0x2002_u128 << 112) | (bits << 80) | u128::from(tail)),
            ];
            for form in forms {
                prop_assert_eq!(classify_v6(form), want, "{} in {}", v4, form);
            }
            if raw > 1 {
                prop_assert_eq!(classify_v6(Ipv6Addr::from(bits)), want);
            }
        }
    }
}
