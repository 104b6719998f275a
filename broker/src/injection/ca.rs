//! The per-run CA: what the gateway terminates a tool's TLS with, for the hosts
//! of injection rules only.
//!
//! Why per run and constrained: a tool must trust this CA for interception to
//! work, so the CA is a key the tool's trust store holds. It is made for one
//! run (its private key is generated in memory, never written, and dropped when
//! the run ends), valid only until the run expires, limited to issuing for
//! leaves (`pathLenConstraint` 0), and name-constrained (RFC 5280 §4.2.1.10) to
//! the DNS subtrees of the injection rules' hosts with every IP address
//! excluded: a certificate it signed for any other name is rejected by the
//! tool's own TLS library, even if the key were stolen.

use rcgen::{
    BasicConstraints, CertificateParams, CidrSubnet, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, KeyPair, KeyUsagePurpose, NameConstraints,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Clock skew allowed before a certificate's start.
const SKEW_SECS: i64 = 300;
/// Host names one run's CA makes leaves for (a wildcard rule could otherwise
/// have it make and keep one per name a tool invents).
pub const MAX_LEAVES: usize = 256;

pub struct RunCa {
    cert: rcgen::Certificate,
    key: KeyPair,
    pub pem: String,
    pub expires_at: i64,
    /// One TLS configuration per host, made on first use.
    leaves: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
}

fn time(unix: i64) -> Result<time::OffsetDateTime, String> {
    time::OffsetDateTime::from_unix_timestamp(unix).map_err(|e| e.to_string())
}

impl RunCa {
    /// A CA for `run_id`, valid from now to `expires_at`, that can only sign
    /// for names in `subtrees`.
    pub fn new(
        run_id: &str,
        subtrees: &[String],
        now: i64,
        expires_at: i64,
    ) -> Result<RunCa, String> {
        if subtrees.is_empty() {
            return Err("no injection rule: no host to issue for".into());
        }
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("Tessera run {run_id}"));
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Tessera egress gateway");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.name_constraints = Some(NameConstraints {
            permitted_subtrees: subtrees
                .iter()
                .map(|s| GeneralSubtree::DnsName(s.clone()))
                .collect(),
            excluded_subtrees: vec![
                GeneralSubtree::IpAddress(CidrSubnet::V4([0; 4], [0; 4])),
                GeneralSubtree::IpAddress(CidrSubnet::V6([0; 16], [0; 16])),
            ],
        });
        params.not_before = time(now - SKEW_SECS)?;
        params.not_after = time(expires_at)?;
        let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
        Ok(RunCa {
            pem: cert.pem(),
            cert,
            key,
            expires_at,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// A leaf certificate for `host`, signed by this CA: `(chain, key)` in DER.
    pub fn leaf(
        &self,
        host: &str,
        now: i64,
    ) -> Result<
        (
            Vec<rustls::pki_types::CertificateDer<'static>>,
            rustls::pki_types::PrivateKeyDer<'static>,
        ),
        String,
    > {
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let mut params =
            CertificateParams::new(vec![host.to_owned()]).map_err(|e| e.to_string())?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.not_before = time(now - SKEW_SECS)?;
        params.not_after = time(self.expires_at)?;
        let leaf = params
            .signed_by(&key, &self.cert, &self.key)
            .map_err(|e| e.to_string())?;
        let private = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der())
            .map_err(|e| e.to_string())?;
        Ok((vec![leaf.der().clone(), self.cert.der().clone()], private))
    }

    /// The TLS configuration the gateway answers `host`'s ClientHello with
    /// (HTTP/1.1 only), made once per host.
    pub fn server_config(&self, host: &str, now: i64) -> Result<Arc<rustls::ServerConfig>, String> {
        if let Ok(leaves) = self.leaves.lock() {
            if let Some(c) = leaves.get(host) {
                return Ok(c.clone());
            }
            if leaves.len() >= MAX_LEAVES {
                return Err(format!(
                    "the run's CA has made leaves for {MAX_LEAVES} hosts"
                ));
            }
        }
        let (chain, key) = self.leaf(host, now)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| e.to_string())?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        if let Ok(mut l) = self.leaves.lock() {
            l.insert(host.to_owned(), config.clone());
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{ServerName, UnixTime};

    fn verify(
        ca: &RunCa,
        chain: &[rustls::pki_types::CertificateDer<'static>],
        name: &str,
        at: i64,
    ) -> Result<(), rustls::Error> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.cert.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        verifier
            .verify_server_cert(
                &chain[0],
                &chain[1..],
                &ServerName::try_from(name.to_owned()).unwrap(),
                &[],
                UnixTime::since_unix_epoch(std::time::Duration::from_secs(at as u64)),
            )
            .map(|_| ())
    }

    #[test]
    fn the_ca_signs_only_for_the_rules_hosts_and_only_for_the_run() {
        let now = 1_800_000_000;
        let ca = RunCa::new(
            "r1",
            &["api.inject.test".into(), "example.com".into()],
            now,
            now + 600,
        )
        .unwrap();
        let (chain, _) = ca.leaf("api.inject.test", now).unwrap();
        verify(&ca, &chain, "api.inject.test", now).expect("a rule's host");
        let (chain, _) = ca.leaf("a.b.example.com", now).unwrap();
        verify(&ca, &chain, "a.b.example.com", now).expect("below a rule's subtree");

        // What the gateway would never sign, signed anyway with the CA's key:
        // the tool's TLS library refuses it by the name constraints.
        for other in ["bank.test", "inject.test", "example.com.evil.test"] {
            let (chain, _) = ca.leaf(other, now).unwrap();
            let e = verify(&ca, &chain, other, now).expect_err(other);
            assert!(
                format!("{e:?}").contains("NameConstraint") || format!("{e:?}").contains("Other"),
                "{other}: {e:?}"
            );
        }
        let (chain, _) = ca.leaf("127.0.0.1", now).unwrap();
        assert!(
            verify(&ca, &chain, "127.0.0.1", now).is_err(),
            "no IP address"
        );

        // At most MAX_LEAVES host names per run.
        for i in 0..MAX_LEAVES {
            ca.server_config(&format!("h{i}.example.com"), now)
                .expect("under the cap");
        }
        assert!(
            ca.server_config("h0.example.com", now).is_ok(),
            "made before"
        );
        assert!(ca.server_config("one-more.example.com", now).is_err());

        // Past the run's expiry the CA and its leaves are worthless.
        let (chain, _) = ca.leaf("api.inject.test", now).unwrap();
        assert!(verify(&ca, &chain, "api.inject.test", now + 601).is_err());
    }
}
