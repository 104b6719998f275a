//! HTTP and HTTPS servers on loopback that the egress gateway's tests connect
//! to through the gateway, with their own test CA; each counts the connections
//! it accepted, so a test can assert that a refused destination saw nothing.
//!
//! Paths: `/big` answers 1 MiB, `/slow` sends one byte every 100 ms for 5 s,
//! `/api/…` describes the request it got without repeating any credential
//! (`method=… path=… auth_sha256=… headers=…`, the SHA-256 of `Authorization`)
//! and records it ([`Upstream::seen`]), anything else
//! `hello from upstream PATH host=HOST`.

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

pub struct Upstream {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    seen: Seen,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The `/api/…` requests received so far, as `METHOD PATH`.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }

    /// A plain HTTP server.
    pub async fn http() -> Upstream {
        Self::start(None).await
    }

    /// An HTTPS server presenting a certificate for `names`, signed by `ca`.
    pub async fn https(ca: &TestCa, names: &[&str]) -> Upstream {
        Self::start(Some(ca.acceptor(names))).await
    }

    async fn start(tls: Option<tokio_rustls::TlsAcceptor>) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let seen: Seen = Arc::default();
        let record = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                count.fetch_add(1, Ordering::SeqCst);
                let tls = tls.clone();
                let record = record.clone();
                tokio::spawn(async move {
                    match tls {
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(tcp).await {
                                serve(stream, &record).await;
                            }
                        }
                        None => serve(tcp, &record).await,
                    }
                });
            }
        });
        Upstream {
            addr,
            accepted,
            seen,
            task,
        }
    }
}

/// A TLS terminator on loopback for `names` (signed by `ca`) in front of a
/// plain TCP service at `target`: how a test puts HTTPS before moto.
pub async fn tls_front(
    ca: &TestCa,
    names: &[&str],
    target: SocketAddr,
) -> (u16, tokio::task::JoinHandle<()>) {
    let acceptor = ca.acceptor(names);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut back) = tokio::net::TcpStream::connect(target).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut back).await;
            });
        }
    });
    (port, task)
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Seen = Arc<std::sync::Mutex<Vec<String>>>;

/// Answers requests on one connection until it closes.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, seen: &Seen) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        buf.drain(..head_end);
        let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
        let host = head
            .lines()
            .find_map(|l| {
                l.split_once(':')
                    .filter(|(k, _)| k.eq_ignore_ascii_case("host"))
                    .map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_default();
        let proxy_auth = head.to_ascii_lowercase().contains("proxy-authorization");
        let body_len: usize = head
            .lines()
            .find_map(|l| {
                l.split_once(':')
                    .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.trim().parse().ok())
            })
            .unwrap_or(0);
        while buf.len() < body_len {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..body_len);
        let method = head.split(' ').next().unwrap_or_default().to_owned();
        let ok = match path.as_str() {
            p if p.starts_with("/api/") => {
                seen.lock().unwrap().push(format!("{method} {p}"));
                let mut names = Vec::new();
                let mut auth = "none".to_owned();
                for line in head.lines().skip(1).filter(|l| !l.is_empty()) {
                    let Some((k, v)) = line.split_once(':') else {
                        continue;
                    };
                    let k = k.trim().to_ascii_lowercase();
                    if k == "authorization" {
                        use sha2::Digest;
                        auth = tessera_broker::ids::hex(&sha2::Sha256::digest(v.trim().as_bytes()));
                        // A JWT's claims (not its signature: no credential).
                        if let Some(claims) = v
                            .trim()
                            .strip_prefix("Bearer ey")
                            .and_then(|t| t.split('.').nth(1))
                        {
                            auth.push_str(&format!(" jwt_claims={claims}"));
                        }
                    }
                    names.push(k);
                }
                names.sort();
                let body = format!(
                    "method={method} path={p} auth_sha256={auth} headers={}",
                    names.join(",")
                );
                // A session cookie, as APIs that log a key in hand out.
                let head = format!(
                    "HTTP/1.1 200 OK\r\nSet-Cookie: session=opened-on-the-key\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                s.write_all(head.as_bytes()).await.is_ok()
                    && s.write_all(body.as_bytes()).await.is_ok()
            }
            "/big" => {
                let body = vec![b'x'; 1 << 20];
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                s.write_all(head.as_bytes()).await.is_ok() && s.write_all(&body).await.is_ok()
            }
            "/slow" => {
                let head = "HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n";
                let mut ok = s.write_all(head.as_bytes()).await.is_ok();
                for _ in 0..50 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    ok = ok && s.write_all(b"s").await.is_ok() && s.flush().await.is_ok();
                }
                ok
            }
            _ => {
                let body = format!(
                    "hello from upstream {path} host={host} proxy-authorization-seen={proxy_auth}"
                );
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                s.write_all(head.as_bytes()).await.is_ok()
                    && s.write_all(body.as_bytes()).await.is_ok()
            }
        };
        if !ok || s.flush().await.is_err() {
            return;
        }
    }
}

/// A CA of the test's own, for the HTTPS upstreams.
pub struct TestCa {
    pub pem: String,
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl TestCa {
    pub fn new() -> TestCa {
        tessera_broker::server::install_crypto_provider();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Subject and issuer must differ from the leaves' (OpenSSL reads a leaf
        // whose subject is its issuer's as self-signed).
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Tessera gateway test CA");
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            pem: cert.pem(),
            cert,
            key,
        }
    }

    fn acceptor(&self, names: &[&str]) -> tokio_rustls::TlsAcceptor {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, names[0]);
        let leaf = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let chain = vec![leaf.der().clone()];
        let private = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .unwrap();
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }
}
