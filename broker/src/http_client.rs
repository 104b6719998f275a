//! The broker's outgoing HTTPS client (IAM, audit witnesses): rustls with the
//! ring provider (the one TLS stack of this binary) and the system's roots.

use std::sync::Arc;
use std::time::Duration;

/// A reqwest client on rustls with the ring provider and the system's roots.
pub fn system_roots() -> Result<reqwest::Client, String> {
    build(reqwest::redirect::Policy::default())
}

/// The same, never following a redirect: what a notification is sent with,
/// so a receiver cannot bounce it (and the broker's requests) elsewhere.
pub fn no_redirects() -> Result<reqwest::Client, String> {
    build(reqwest::redirect::Policy::none())
}

fn build(redirects: reqwest::redirect::Policy) -> Result<reqwest::Client, String> {
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    for cert in found.certs {
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        tracing::warn!("no system root certificates found: outgoing https calls will fail");
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .redirect(redirects)
        .no_proxy()
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(15))
        .build()
        .map_err(|e| e.to_string())
}
