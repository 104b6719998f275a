//! The TLS side of the listener: rustls (ring) configuration, optionally mTLS for runtimes.
//!
//! With TLS, ALPN offers HTTP/2 and HTTP/1.1. When a client CA is configured, a
//! client certificate is optional at the TLS layer (tools in sandboxes have none)
//! but, when presented, must chain to that CA; the verified fact is attached to
//! every request of the connection as [`ClientCertificate`], and runtime
//! credentials are then only accepted on connections that carry one
//! (`tls.require_runtime_client_cert`).

use crate::config::TlsConfig;
use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use std::path::Path;
use std::sync::Arc;

/// Set on every request of a TLS connection whose client presented a certificate
/// that chains to the configured client CA.
#[derive(Debug, Clone)]
pub struct ClientCertificate {
    /// SHA-256 (lowercase hex) of the leaf certificate's DER encoding.
    pub sha256: String,
}

/// Makes ring the process-wide rustls provider (the one crypto stack of this
/// binary); HTTP clients built without an explicit TLS config rely on it.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Every certificate in a PEM file (at least one); `what` prefixes errors.
pub fn read_certificates(path: &Path, what: &str) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("{what}: cannot read {}", path.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("{what}: {} is not PEM certificates", path.display()))?;
    if certs.is_empty() {
        anyhow::bail!("{what}: {} holds no certificate", path.display());
    }
    Ok(certs)
}

/// A root store of every certificate in a PEM file (a private CA).
pub fn read_roots(path: &Path, what: &str) -> anyhow::Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certificates(path, what)? {
        roots
            .add(cert)
            .with_context(|| format!("{what}: bad certificate in {}", path.display()))?;
    }
    Ok(roots)
}

/// Builds the rustls server configuration (ring provider, TLS 1.2/1.3, h2 + http/1.1).
pub fn tls_config(tls: &TlsConfig) -> anyhow::Result<ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = read_certificates(&tls.cert_file, "config error: tls.cert_file")?;
    let key = PrivateKeyDer::from_pem_file(&tls.key_file).with_context(|| {
        format!(
            "config error: tls.key_file: cannot read a private key from {}",
            tls.key_file.display()
        )
    })?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?;
    let builder = match &tls.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = read_roots(ca, "config error: tls.client_ca_file")?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .context("config error: tls.client_ca_file")?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .context("config error: tls.key_file does not match tls.cert_file")?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
