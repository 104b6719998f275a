//! Address ranges a permit may open for the runs it holds for
//! (`@allow_addresses("127.0.0.0/8, ::1/128")`): the one way past the egress
//! gateway's refusal of loopback, private, link-local and other non-public
//! addresses (`gateway::addresses`).
//!
//! Strict like every annotation: a range is written in its network form (no
//! host bits set, so `10.0.0.1/8` is refused rather than read as `10/8`), at
//! most 16 ranges, and an IPv4 range also covers the IPv6 forms that carry its
//! addresses (`::ffff:127.0.0.1` is 127.0.0.1 to the gateway).

use std::net::IpAddr;

/// Most ranges one annotation may list.
pub const MAX_RANGES: usize = 16;

/// One network, `ADDRESS/BITS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

impl Cidr {
    /// Whether `ip` is in this network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.bits)).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.bits))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.bits)
    }
}

impl std::str::FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, bits) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not ADDRESS/BITS"))?;
        let net: IpAddr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IP address"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let bits: u8 = bits
            .parse()
            .ok()
            .filter(|b| {
                *b <= max && !bits.starts_with('+') && (bits == "0" || !bits.starts_with('0'))
            })
            .ok_or_else(|| format!("{bits:?} is not a prefix length from 0 to {max}"))?;
        let cidr = Cidr { net, bits };
        let canonical = Cidr {
            net: match net {
                IpAddr::V4(v4) => IpAddr::V4(
                    (u32::from(v4) & u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0))
                        .into(),
                ),
                IpAddr::V6(v6) => IpAddr::V6(
                    (u128::from(v6) & u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0))
                        .into(),
                ),
            },
            bits,
        };
        if canonical != cidr {
            return Err(format!(
                "{s:?} has host bits set; the network is {canonical}"
            ));
        }
        Ok(cidr)
    }
}

/// A comma-separated list of ranges, as `@allow_addresses` takes it.
pub fn parse_list(value: &str) -> Result<Vec<Cidr>, String> {
    let ranges = value
        .split(',')
        .map(|r| r.trim().parse::<Cidr>())
        .collect::<Result<Vec<_>, _>>()?;
    if ranges.is_empty() || ranges.len() > MAX_RANGES {
        return Err(format!("1 to {MAX_RANGES} ranges"));
    }
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_written_as_networks() {
        let c: Cidr = "127.0.0.0/8".parse().unwrap();
        assert!(c.contains("127.9.9.9".parse().unwrap()));
        assert!(!c.contains("128.0.0.1".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let one: Cidr = "::1/128".parse().unwrap();
        assert!(one.contains("::1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
        for bad in [
            "10.0.0.1/8",
            "10.0.0.0",
            "10.0.0.0/33",
            "10.0.0.0/08",
            "x/8",
            "::1/129",
            "10.0.0.0/+8",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
        assert_eq!(parse_list("127.0.0.0/8, ::1/128").unwrap().len(), 2);
        assert!(parse_list("").is_err());
    }
}
