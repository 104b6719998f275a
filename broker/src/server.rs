//! Serving the router: plain HTTP, or TLS with rustls (optionally mTLS for runtimes).
//!
//! With TLS, ALPN offers HTTP/2 and HTTP/1.1. When a client CA is configured, a
//! client certificate is optional at the TLS layer (tools in sandboxes have none)
//! but, when presented, must chain to that CA; the verified fact is attached to
//! every request of the connection as [`ClientCertificate`], and runtime
//! credentials are then only accepted on connections that carry one
//! (`tls.require_runtime_client_cert`).

use crate::config::TlsConfig;
use anyhow::Context;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// Set on every request of a TLS connection whose client presented a certificate
/// that chains to the configured client CA.
#[derive(Debug, Clone)]
pub struct ClientCertificate {
    /// SHA-256 (lowercase hex) of the leaf certificate's DER encoding.
    pub sha256: String,
}

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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

/// Serves `router` over TLS until `shutdown` completes.
pub async fn serve_tls(
    listener: TcpListener,
    router: Router,
    config: ServerConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let acceptor = acceptor.clone();
        let router = router.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            // rustls only reports peer certificates it verified against the client CA.
            let verified = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|leaf| ClientCertificate {
                    sha256: crate::ids::sha256_hex(leaf.as_ref()),
                });
            let service =
                router.map_request(move |mut req: hyper::Request<hyper::body::Incoming>| {
                    if let Some(cert) = &verified {
                        req.extensions_mut().insert(cert.clone());
                    }
                    req
                });
            let conn = Builder::new(TokioExecutor::new())
                .serve_connection_with_upgrades(
                    TokioIo::new(stream),
                    TowerToHyperService::new(service),
                )
                .into_owned();
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    tokio::select! {
        _ = graceful.shutdown() => {},
        _ = tokio::time::sleep(Duration::from_secs(10)) => {
            tracing::warn!("connections still open after 10 s; closing them");
        }
    }
    Ok(())
}
