//! Names are resolved by the gateway itself, never by the client and never
//! twice: the addresses returned here are the ones checked and the ones
//! connected to (`decide`), so a name that answers a public address to the check
//! and 127.0.0.1 to the connection (DNS rebinding) cannot happen.
//!
//! Why hickory and not the system's `getaddrinfo`: the nameservers are the
//! operator's to choose (`gateway.nameservers`), the hosts file is not read (a
//! sandbox-adjacent file that maps names to loopback), there is no cache the
//! gateway does not control (it keeps none: each connection is checked anew),
//! and both A and AAAA answers are returned, so every address a name has is
//! checked, not only the first.

use hickory_resolver::config::{
    ConnectionConfig, LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig,
    ResolverOpts,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::TokioResolver;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

pub struct Resolver {
    inner: TokioResolver,
    timeout: Duration,
}

impl Resolver {
    /// A resolver asking `nameservers` (empty: those of `/etc/resolv.conf`).
    pub fn new(nameservers: &[SocketAddr], timeout: Duration) -> anyhow::Result<Resolver> {
        let mut builder = if nameservers.is_empty() {
            TokioResolver::builder_tokio()?
        } else {
            let mut config = ResolverConfig::from_name_servers(vec![]);
            for ns in nameservers {
                let mut udp = ConnectionConfig::udp();
                udp.port = ns.port();
                let mut tcp = ConnectionConfig::tcp();
                tcp.port = ns.port();
                config.add_name_server(NameServerConfig::new(ns.ip(), true, vec![udp, tcp]));
            }
            TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
        };
        let opts: &mut ResolverOpts = builder.options_mut();
        opts.cache_size = 0;
        opts.use_hosts_file = ResolveHosts::Never;
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        opts.timeout = timeout.min(Duration::from_secs(5));
        opts.attempts = 2;
        // Names are asked as written (fully qualified): no search domains.
        opts.ndots = 0;
        Ok(Resolver {
            inner: builder.build()?,
            timeout,
        })
    }

    /// Every address `name` has (A and AAAA), or why there is none.
    pub async fn lookup(&self, name: &str) -> Result<Vec<IpAddr>, String> {
        let fqdn = format!("{name}.");
        match tokio::time::timeout(self.timeout, self.inner.lookup_ip(fqdn.as_str())).await {
            Err(_) => Err("the name did not resolve in time".into()),
            Ok(Err(e)) => Err(format!(
                "the name does not resolve: {}",
                short(&e.to_string())
            )),
            Ok(Ok(found)) => {
                let mut addrs: Vec<IpAddr> = found.iter().collect();
                addrs.dedup();
                if addrs.is_empty() {
                    Err("the name has no address".into())
                } else {
                    Ok(addrs)
                }
            }
        }
    }
}

fn short(s: &str) -> String {
    s.chars().take(160).collect()
}
