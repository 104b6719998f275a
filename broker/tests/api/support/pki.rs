//! A test PKI: a CA, a server certificate for `tessera.test` (and `localhost`), two client
//! certificates it signed, and a rogue one it did not.

use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair};

/// PEM certificates and keys: `(certificate, key)`.
pub struct Pki {
    pub ca_pem: String,
    pub server: (String, String),
    pub client: (String, String),
    pub other_client: (String, String),
    pub rogue: (String, String),
}

pub fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf = |names: Vec<String>,
                usage: ExtendedKeyUsagePurpose,
                signer: Option<(&rcgen::Certificate, &KeyPair)>| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names).unwrap();
        params.extended_key_usages = vec![usage];
        let cert = match signer {
            Some((c, k)) => params.signed_by(&key, c, k).unwrap(),
            None => params.self_signed(&key).unwrap(),
        };
        (cert.pem(), key.serialize_pem())
    };
    Pki {
        ca_pem: ca.pem(),
        server: leaf(
            vec!["tessera.test".into(), "localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
            Some((&ca, &ca_key)),
        ),
        client: leaf(
            vec!["runtime-1".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
            Some((&ca, &ca_key)),
        ),
        other_client: leaf(
            vec!["runtime-2".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
            Some((&ca, &ca_key)),
        ),
        rogue: leaf(
            vec!["runtime-1".into()],
            ExtendedKeyUsagePurpose::ClientAuth,
            None,
        ),
    }
}
