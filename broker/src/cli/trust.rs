//! `tessera exec --egress`, when the broker injects credentials: the command
//! trusts the run's CA, and SDKs that insist on an API key find a placeholder.
//!
//! The bundle is the system's roots, any bundle the command was already told
//! to trust (`SSL_CERT_FILE` kept with `--keep-env`), and the run's CA; every
//! variable a common TLS stack reads points at it (OpenSSL and Python's `ssl`,
//! requests, curl, Node, the AWS SDKs and CLI). It holds no secret: the CA's
//! key never leaves the gateway, and the CA can only sign for the injection
//! rules' hosts until the run expires. The folder is removed when `exec` ends.

use base64::Engine as _;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use tessera_client::types::GatewaySession;

/// The variables that name a CA bundle, one per TLS stack.
pub const BUNDLE_VARIABLES: [&str; 5] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "AWS_CA_BUNDLE",
];

/// The bundle's folder while the command runs.
pub struct TrustBundle {
    dir: PathBuf,
}

impl Drop for TrustBundle {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .filter_map(|c| std::str::from_utf8(c).ok())
        .collect();
    format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        lines.join("\n")
    )
}

/// Writes the bundle and sets the command's variables: the bundle's and each
/// placeholder's.
pub fn install(
    session: &GatewaySession,
    env: &mut BTreeMap<String, String>,
) -> Result<TrustBundle, String> {
    let mut bundle = String::new();
    for cert in rustls_native_certs::load_native_certs().certs {
        bundle.push_str(&pem(&cert));
    }
    if let Some(kept) = env.get("SSL_CERT_FILE") {
        // Only its certificates: `exec` may be root and the bundle is readable
        // by the command, so nothing else of the file it names is copied.
        use rustls::pki_types::pem::PemObject;
        let text =
            std::fs::read(kept).map_err(|e| format!("--egress: SSL_CERT_FILE {kept}: {e}"))?;
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&text) {
            let cert = cert.map_err(|e| format!("--egress: SSL_CERT_FILE {kept}: {e}"))?;
            bundle.push_str(&pem(&cert));
        }
    }
    bundle.push_str(&session.ca_pem);
    let dir = std::env::temp_dir().join(format!("tessera-exec-{}", crate::ids::hex(&rand_bytes())));
    // Readable by the command's user (--user): the bundle holds no secret.
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&dir)
        .map_err(|e| format!("--egress: {}: {e}", dir.display()))?;
    let path = dir.join("ca-bundle.pem");
    let trust = TrustBundle { dir };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&path)
        .map_err(|e| format!("--egress: {}: {e}", path.display()))?;
    f.write_all(bundle.as_bytes())
        .map_err(|e| format!("--egress: {}: {e}", path.display()))?;
    let shown = path.display().to_string();
    for var in BUNDLE_VARIABLES {
        env.insert(var.to_owned(), shown.clone());
    }
    for p in &session.placeholders {
        env.insert(p.env.clone(), p.value.clone());
    }
    Ok(trust)
}

fn rand_bytes() -> [u8; 8] {
    let mut b = [0u8; 8];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b);
    b
}
