//! `[gateway]`: the egress gateway, a forward proxy listener of `tessera serve`
//! (docs/gateway.md). Absent (no `listen`): no gateway.

use super::{duration_setting, err, BackendConfig, ConfigError};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGateway {
    listen: Option<String>,
    backend: Option<String>,
    nameservers: Option<Vec<String>>,
    end_run_on_deny: Option<bool>,
    max_connections: Option<u32>,
    max_connections_per_run: Option<u32>,
    max_bytes_up_per_run: Option<u64>,
    max_bytes_down_per_run: Option<u64>,
    max_connection_duration: Option<String>,
    connect_timeout: Option<String>,
    upstream_roots: Option<std::path::PathBuf>,
    end_run_on_placeholder_misuse: Option<bool>,
}

#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Where the proxy listens (plain HTTP: a client's `HTTPS_PROXY=http://…`).
    pub listen: SocketAddr,
    /// The `net` backend whose resources policy decides (`net:HOST:PORT`).
    pub backend: String,
    /// DNS servers the gateway asks (`IP:PORT`); empty: the system's
    /// (`/etc/resolv.conf`). The hosts file is never read.
    pub nameservers: Vec<SocketAddr>,
    /// End the run the moment it tries a destination it may not reach.
    pub end_run_on_deny: bool,
    /// Open proxy connections in all, across runs.
    pub max_connections: u32,
    /// Open upstream connections of one run at once.
    pub max_connections_per_run: u32,
    /// Bytes one run may send upstream, in all its connections (per gateway process).
    pub max_bytes_up_per_run: u64,
    /// Bytes one run may receive, in all its connections (per gateway process).
    pub max_bytes_down_per_run: u64,
    /// How long one upstream connection may stay open.
    pub max_connection_duration: Duration,
    /// How long the gateway waits for an upstream to accept, and for a
    /// `CONNECT` client's TLS ClientHello.
    pub connect_timeout: Duration,
    /// The CAs injected requests' APIs are verified against (a PEM bundle);
    /// `None`: the system's trust store.
    pub upstream_roots: Option<std::path::PathBuf>,
    /// End the run when one of its placeholders is sent anywhere but its API.
    pub end_run_on_placeholder_misuse: bool,
}

pub(super) fn resolve(
    raw: RawGateway,
    backends: &BTreeMap<String, BackendConfig>,
) -> Result<Option<GatewayConfig>, ConfigError> {
    let Some(listen) = raw.listen else {
        return Ok(None);
    };
    let listen: SocketAddr = listen
        .parse()
        .map_err(|_| err("gateway.listen", format!("not an address:port: {listen:?}")))?;
    if !listen.ip().is_loopback() {
        // Forward proxies speak plain HTTP: a run token sent from elsewhere crosses
        // the network in clear. Allowed (a pod network may be trusted), and said.
        tracing::warn!(%listen, "gateway.listen is not a loopback address: clients' run tokens reach it in clear");
    }
    let backend = raw.backend.unwrap_or_else(|| "net".to_owned());
    if !matches!(backends.get(&backend), Some(BackendConfig::Net(_))) {
        return Err(err(
            "gateway.backend",
            format!("needs [backends.{backend}] with kind = \"net\": its resources are the destinations policy decides"),
        ));
    }
    let nameservers = raw
        .nameservers
        .unwrap_or_default()
        .iter()
        .map(|s| {
            s.parse::<SocketAddr>()
                .or_else(|_| {
                    s.parse::<std::net::IpAddr>()
                        .map(|ip| SocketAddr::new(ip, 53))
                })
                .map_err(|_| {
                    err(
                        "gateway.nameservers",
                        format!("not an IP or IP:PORT: {s:?}"),
                    )
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let bounded = |name: &str, v: Option<u32>, default: u32, max: u32| {
        let v = v.unwrap_or(default);
        if (1..=max).contains(&v) {
            Ok(v)
        } else {
            Err(err(
                &format!("gateway.{name}"),
                format!("must be between 1 and {max}"),
            ))
        }
    };
    let max_connection_duration = duration_setting(
        "gateway.max_connection_duration",
        &raw.max_connection_duration,
        Duration::from_secs(3600),
    )?;
    let connect_timeout = duration_setting(
        "gateway.connect_timeout",
        &raw.connect_timeout,
        Duration::from_secs(10),
    )?;
    if connect_timeout.is_zero() || max_connection_duration.is_zero() {
        return Err(err("gateway", "durations must be above zero"));
    }
    Ok(Some(GatewayConfig {
        listen,
        backend,
        nameservers,
        end_run_on_deny: raw.end_run_on_deny.unwrap_or(false),
        max_connections: bounded("max_connections", raw.max_connections, 1024, 65_536)?,
        max_connections_per_run: bounded(
            "max_connections_per_run",
            raw.max_connections_per_run,
            64,
            65_536,
        )?,
        max_bytes_up_per_run: raw.max_bytes_up_per_run.unwrap_or(1 << 30).max(1),
        max_bytes_down_per_run: raw.max_bytes_down_per_run.unwrap_or(4 << 30).max(1),
        max_connection_duration,
        connect_timeout,
        upstream_roots: raw.upstream_roots,
        end_run_on_placeholder_misuse: raw.end_run_on_placeholder_misuse.unwrap_or(false),
    }))
}
