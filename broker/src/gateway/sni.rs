//! The server name a `CONNECT` client's TLS ClientHello asks for, read before
//! any byte goes upstream.
//!
//! Why: policy decided `CONNECT api.allowed.example:443`, but inside the tunnel
//! the client could greet a different virtual host on the same address (domain
//! fronting: a CDN serves many names on one IP), or speak something that is not
//! TLS at all. So the gateway reads the first flight itself and refuses a name
//! other than the one decided, an absent name where a name was decided, a name
//! where an address literal was decided, and anything that is not a TLS
//! ClientHello. rustls's `Acceptor` parses the hello (a maintained parser, not
//! one of ours); the bytes are kept and replayed upstream unchanged.

use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Largest first flight read (a ClientHello with post-quantum key shares is
/// under 2 KiB; 64 KiB bounds a hostile one).
const MAX_HELLO: usize = 64 * 1024;

#[derive(Debug, PartialEq, Eq)]
pub enum HelloError {
    /// Not a TLS ClientHello (another protocol tunnelled through CONNECT).
    NotTls,
    /// The client sent nothing usable in time, or closed.
    Timeout,
    Closed,
}

/// Reads until a whole ClientHello is in: the bytes read and the server name it
/// asks for (`None`: no SNI).
pub async fn read_client_hello<R: AsyncRead + Unpin>(
    io: &mut R,
    timeout: Duration,
) -> Result<(Vec<u8>, Option<String>), HelloError> {
    let read = async {
        let mut acceptor = rustls::server::Acceptor::default();
        let mut buf: Vec<u8> = Vec::with_capacity(2048);
        let mut fed = 0;
        let mut chunk = [0u8; 4096];
        loop {
            let n = io.read(&mut chunk).await.map_err(|_| HelloError::Closed)?;
            if n == 0 {
                return Err(HelloError::Closed);
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > MAX_HELLO {
                return Err(HelloError::NotTls);
            }
            while fed < buf.len() {
                let mut rest = &buf[fed..];
                match acceptor.read_tls(&mut rest) {
                    Ok(0) => break,
                    Ok(k) => fed += k,
                    Err(_) => return Err(HelloError::NotTls),
                }
            }
            match acceptor.accept() {
                Ok(None) => continue,
                Ok(Some(accepted)) => {
                    let name = accepted
                        .client_hello()
                        .server_name()
                        .map(|s| s.to_ascii_lowercase());
                    return Ok((buf, name));
                }
                Err(_) => return Err(HelloError::NotTls),
            }
        }
    };
    tokio::time::timeout(timeout, read)
        .await
        .unwrap_or(Err(HelloError::Timeout))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real ClientHello for `name`, made by rustls's client.
    fn hello(name: &str) -> Vec<u8> {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let server = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
        let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), server).unwrap();
        let mut out = Vec::new();
        conn.write_tls(&mut out).unwrap();
        out
    }

    #[tokio::test]
    async fn the_name_is_read_and_the_bytes_kept() {
        let bytes = hello("API.example.com");
        let (got, name) = read_client_hello(&mut bytes.as_slice(), Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(got, bytes);
        assert_eq!(name.as_deref(), Some("api.example.com"));
        let ip = hello("127.0.0.1");
        let (_, name) = read_client_hello(&mut ip.as_slice(), Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(name, None, "no SNI for an address literal");
    }

    #[tokio::test]
    async fn anything_else_is_refused() {
        for other in [
            b"SSH-2.0-OpenSSH_9.6\r\n".to_vec(),
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            vec![0x16, 0x03, 0x01, 0xff, 0xff, 0x01],
        ] {
            let mut input = other.as_slice();
            let got = read_client_hello(&mut input, Duration::from_millis(200)).await;
            assert!(
                matches!(got, Err(HelloError::NotTls | HelloError::Closed)),
                "{other:?}: {got:?}"
            );
        }
    }
}
