//! The gateway's own TLS client for injected requests: it verifies the real
//! API's certificate against the system's roots (or `gateway.upstream_roots`,
//! a PEM bundle that replaces them), so a credential is only ever sent to the
//! host it is for. Interception without this check would hand the secret to
//! whoever answers for the name.

use std::path::Path;
use std::sync::Arc;

/// The client configuration: `roots` (a PEM file) or the system's trust store.
pub fn client_config(roots: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    let mut store = rustls::RootCertStore::empty();
    match roots {
        Some(path) => {
            let pem = std::fs::read(path)
                .map_err(|e| format!("gateway.upstream_roots: {}: {e}", path.display()))?;
            let mut reader = std::io::BufReader::new(pem.as_slice());
            for cert in rustls_pemfile_certs(&mut reader)? {
                store
                    .add(cert)
                    .map_err(|e| format!("gateway.upstream_roots: {e}"))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = store.add(cert);
            }
        }
    }
    if store.is_empty() {
        return Err(
            "no trusted roots for upstream TLS (gateway.upstream_roots, or the system's)".into(),
        );
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The certificates of a PEM bundle.
fn rustls_pemfile_certs(
    reader: &mut dyn std::io::BufRead,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    let mut text = Vec::new();
    reader.read_to_end(&mut text).map_err(|e| e.to_string())?;
    rustls::pki_types::CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("gateway.upstream_roots: not a PEM bundle: {e}"))
}
