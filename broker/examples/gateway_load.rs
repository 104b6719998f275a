//! Load for the egress gateway (`bench/gateway.sh`), on loopback only: the
//! same requests sent directly and through the gateway, so the two can be
//! compared side by side in one run.
//!
//! ```text
//! gateway_load upstream HTTP_PORT TLS_PORT CA_FILE   # HTTP and HTTPS servers on 127.0.0.1 until killed
//! gateway_load conns PORT SECONDS WORKERS [GATEWAY TOKENS_FILE]
//!     # a new connection per request (GET /small); prints connections/s
//! gateway_load stream TLS_PORT CA_FILE MIB [GATEWAY TOKEN]
//!     # one TLS connection (CONNECT through the gateway), GET /stream; prints MiB/s
//! gateway_load dns PORT                # answers A 127.0.0.1 for every name, UDP, until killed
//! gateway_load api TLS_PORT CA_FILE    # keep-alive HTTPS for *.bench.test until killed
//! gateway_load requests HOST PORT SECONDS WORKERS CA_FILE [GATEWAY SESSIONS_FILE]
//!     # one keep-alive TLS connection per worker, GET /small again and again;
//!     # through the gateway, worker i uses line i of SESSIONS_FILE ("TOKEN CA_FILE")
//! ```

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[tokio::main]
async fn main() -> Result<()> {
    tessera_broker::server::install_crypto_provider();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    match arg(0).as_str() {
        "upstream" => upstream(arg(1).parse()?, arg(2).parse()?, &arg(3)).await,
        "conns" => {
            let proxy = args.get(4).map(|gw| (gw.clone(), tokens(&arg(5))));
            conns(arg(1).parse()?, arg(2).parse()?, arg(3).parse()?, proxy).await
        }
        "stream" => {
            let proxy = args.get(4).map(|gw| (gw.clone(), arg(5)));
            stream(arg(1).parse()?, &arg(2), arg(3).parse()?, proxy).await
        }
        "dns" => dns(arg(1).parse()?).await,
        "api" => api(arg(1).parse()?, &arg(2)).await,
        "requests" => {
            let proxy = args.get(6).map(|gw| (gw.clone(), sessions(&arg(7))));
            requests(
                &arg(1),
                arg(2).parse()?,
                arg(3).parse()?,
                arg(4).parse()?,
                &arg(5),
                proxy,
            )
            .await
        }
        _ => Err(
            "usage: gateway_load upstream|conns|stream|dns|api|requests … (see the source)".into(),
        ),
    }
}

fn tokens(file: &str) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .filter(|l| !l.is_empty())
        .collect()
}

async fn upstream(http_port: u16, tls_port: u16, ca_file: &str) -> Result<()> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "gateway_load CA");
    let ca = ca_params.self_signed(&ca_key)?;
    std::fs::write(ca_file, ca.pem())?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "127.0.0.1");
    let leaf = params.signed_by(&key, &ca, &ca_key)?;
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der())?,
        )?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let http = TcpListener::bind(("127.0.0.1", http_port)).await?;
    let tls = TcpListener::bind(("127.0.0.1", tls_port)).await?;
    tokio::spawn(async move {
        while let Ok((s, _)) = http.accept().await {
            let _ = s.set_nodelay(true);
            tokio::spawn(serve(s));
        }
    });
    while let Ok((s, _)) = tls.accept().await {
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let _ = s.set_nodelay(true);
            if let Ok(s) = acceptor.accept(s).await {
                serve(s).await;
            }
        });
    }
    Ok(())
}

/// `/small`: 13 bytes; `/stream/MIB`: MIB MiB of zeros. One request, then close.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf);
    let path = head.split(' ').nth(1).unwrap_or("/");
    let mib: u64 = path
        .rsplit_once("/stream/")
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(0);
    if mib > 0 {
        let len = mib << 20;
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n");
        if s.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let block = vec![0u8; 64 * 1024];
        for _ in 0..(len / block.len() as u64) {
            if s.write_all(&block).await.is_err() {
                return;
            }
        }
    } else {
        let _ = s
            .write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\nConnection: close\r\n\r\nhello, world\n",
            )
            .await;
    }
    let _ = s.shutdown().await;
}

async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> Result<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await? == 0 {
            return Err("closed before the head".into());
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

async fn conns(
    port: u16,
    seconds: u64,
    workers: usize,
    proxy: Option<(String, Vec<String>)>,
) -> Result<()> {
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (done, failed, proxy) = (done.clone(), failed.clone(), proxy.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let request = match &proxy {
                    Some((_, tokens)) => format!(
                        "GET http://127.0.0.1:{port}/small HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
                         Proxy-Authorization: Bearer {}\r\nConnection: close\r\n\r\n",
                        tokens[w % tokens.len()]
                    ),
                    None => format!(
                        "GET /small HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
                    ),
                };
                let target = proxy
                    .as_ref()
                    .map_or_else(|| format!("127.0.0.1:{port}"), |(gw, _)| gw.clone());
                let ok = async {
                    let mut s = TcpStream::connect(&target).await?;
                    s.set_nodelay(true)?;
                    s.write_all(request.as_bytes()).await?;
                    let mut out = Vec::new();
                    s.read_to_end(&mut out).await?;
                    Ok::<bool, std::io::Error>(
                        out.starts_with(b"HTTP/1.1 200") && out.ends_with(b"hello, world\n"),
                    )
                }
                .await;
                match ok {
                    Ok(true) => done.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    let started = Instant::now();
    for t in tasks {
        t.await?;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{:.0} connections/s ({} ok, {} failed, {secs:.1} s)",
        done.load(Ordering::Relaxed) as f64 / secs,
        done.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
    Ok(())
}

async fn stream(
    tls_port: u16,
    ca_file: &str,
    mib: u64,
    proxy: Option<(String, String)>,
) -> Result<()> {
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca_file)? {
        roots.add(c?)?;
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let started = Instant::now();
    let tcp = match &proxy {
        Some((gw, token)) => {
            let mut s = TcpStream::connect(gw).await?;
            s.write_all(
                format!(
                    "CONNECT 127.0.0.1:{tls_port} HTTP/1.1\r\nHost: 127.0.0.1:{tls_port}\r\n\
                     Proxy-Authorization: Bearer {token}\r\n\r\n"
                )
                .as_bytes(),
            )
            .await?;
            let head = read_head(&mut s).await?;
            if !head.starts_with("HTTP/1.1 200") {
                return Err(format!("CONNECT refused: {head}").into());
            }
            s
        }
        None => TcpStream::connect(("127.0.0.1", tls_port)).await?,
    };
    tcp.set_nodelay(true)?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
    let mut tls = connector.connect(name, tcp).await?;
    tls.write_all(format!("GET /stream/{mib} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await?;
    let _ = read_head(&mut tls).await?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0u64;
    loop {
        match tls.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => got += n as u64,
            // A peer that closes without close_notify after the whole body.
            Err(_) if got >= mib << 20 => break,
            Err(e) => return Err(e.into()),
        }
    }
    let secs = started.elapsed().as_secs_f64();
    if got < mib << 20 {
        return Err(format!("only {got} bytes of {} arrived", mib << 20).into());
    }
    println!("{:.0} MiB/s ({mib} MiB in {secs:.2} s)", mib as f64 / secs);
    Ok(())
}

/// `(token, CA file)` per line.
fn sessions(file: &str) -> Vec<(String, String)> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(t, c)| (t.to_owned(), c.to_owned()))
        .collect()
}

/// A DNS server for the injection benchmark: every A question is answered
/// 127.0.0.1 (TTL 0), anything else with no answer.
async fn dns(port: u16) -> Result<()> {
    let socket = tokio::net::UdpSocket::bind(("127.0.0.1", port)).await?;
    let mut buf = [0u8; 512];
    loop {
        let (n, from) = socket.recv_from(&mut buf).await?;
        if n < 12 {
            continue;
        }
        // The question ends after its name (labels until 0) and type and class.
        let mut i = 12;
        while i < n && buf[i] != 0 {
            i += 1 + buf[i] as usize;
        }
        let end = i + 5;
        if end > n {
            continue;
        }
        let qtype = u16::from_be_bytes([buf[i + 1], buf[i + 2]]);
        let mut out = buf[..end].to_vec();
        out[2] = 0x84 | (buf[2] & 0x01); // response, authoritative, RD copied
        out[3] = 0x80; // RA, no error
        out[6..8].copy_from_slice(&u16::from(qtype == 1).to_be_bytes());
        out[8..12].fill(0);
        if qtype == 1 {
            out.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, 127, 0, 0, 1]);
        }
        let _ = socket.send_to(&out, from).await;
    }
}

/// A keep-alive HTTPS API for `*.bench.test`: `/small` answers 13 bytes, and the
/// connection stays open for the next request.
async fn api(tls_port: u16, ca_file: &str) -> Result<()> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "gateway_load API CA");
    let ca = ca_params.self_signed(&ca_key)?;
    std::fs::write(ca_file, ca.pem())?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec![
        "api.bench.test".to_owned(),
        "tunnel.bench.test".to_owned(),
    ])?;
    params
        .distinguished_name
        .push(DnType::CommonName, "api.bench.test");
    let leaf = params.signed_by(&key, &ca, &ca_key)?;
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der())?,
        )?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let tls = TcpListener::bind(("127.0.0.1", tls_port)).await?;
    while let Ok((s, _)) = tls.accept().await {
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let _ = s.set_nodelay(true);
            let Ok(mut s) = acceptor.accept(s).await else {
                return;
            };
            while read_head(&mut s).await.is_ok() {
                let ok = s
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\nhello, world\n")
                    .await;
                if ok.is_err() || s.flush().await.is_err() {
                    return;
                }
            }
        });
    }
    Ok(())
}

/// Reads one `/small` response (head and its 13 bytes).
async fn small_response<S: AsyncRead + Unpin>(s: &mut S) -> Result<bool> {
    let head = read_head(s).await?;
    let mut body = [0u8; 13];
    s.read_exact(&mut body).await?;
    Ok(head.starts_with("HTTP/1.1 200") && &body == b"hello, world\n")
}

async fn requests(
    host: &str,
    port: u16,
    seconds: u64,
    workers: usize,
    ca_file: &str,
    proxy: Option<(String, Vec<(String, String)>)>,
) -> Result<()> {
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (done, failed, proxy) = (done.clone(), failed.clone(), proxy.clone());
        let (host, ca_file) = (host.to_owned(), ca_file.to_owned());
        tasks.push(tokio::spawn(async move {
            let run = async {
                let (tcp, ca) = match &proxy {
                    Some((gw, sessions)) => {
                        let (token, ca) = &sessions[w % sessions.len()];
                        let mut s = TcpStream::connect(gw).await?;
                        s.write_all(
                            format!(
                                "CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\
                                 Proxy-Authorization: Bearer {token}\r\n\r\n"
                            )
                            .as_bytes(),
                        )
                        .await?;
                        let head = read_head(&mut s).await?;
                        if !head.starts_with("HTTP/1.1 200") {
                            return Err(format!("CONNECT refused: {head}").into());
                        }
                        (s, ca.clone())
                    }
                    None => (TcpStream::connect(("127.0.0.1", port)).await?, ca_file),
                };
                tcp.set_nodelay(true)?;
                let mut roots = rustls::RootCertStore::empty();
                use rustls::pki_types::pem::PemObject;
                for c in rustls::pki_types::CertificateDer::pem_file_iter(&ca)? {
                    roots.add(c?)?;
                }
                let config = rustls::ClientConfig::builder()
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
                let name = rustls::pki_types::ServerName::try_from(host.clone())?;
                let mut tls = connector.connect(name, tcp).await?;
                let request = format!("GET /small HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n");
                while Instant::now() < deadline {
                    tls.write_all(request.as_bytes()).await?;
                    if small_response(&mut tls).await? {
                        done.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
            };
            if let Err(e) = run.await {
                eprintln!("worker {w}: {e}");
                failed.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let started = Instant::now();
    for t in tasks {
        t.await?;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{:.0} requests/s ({} ok, {} failed, {secs:.1} s)",
        done.load(Ordering::Relaxed) as f64 / secs,
        done.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
    Ok(())
}
