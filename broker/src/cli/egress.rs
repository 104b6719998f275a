//! `tessera exec --egress GATEWAY [--isolate-net]`: the command's traffic goes
//! through the broker's egress gateway, and the command never holds the run
//! token.
//!
//! How: `exec` runs a small relay on loopback. The command's proxy variables
//! (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, lower case too) point at it with a
//! credential made for this `exec` alone (worthless anywhere else, dead when
//! `exec` exits). The relay checks that credential, replaces it with the run's
//! `Proxy-Authorization` and passes the request on to the gateway, which decides
//! and audits every connection as the run's; then it only moves bytes.
//!
//! With `--isolate-net` (Linux, as root) the command runs in a network
//! namespace of its own whose only interface is loopback, and the relay listens
//! *inside* it: the namespace is made on a thread of `exec`'s that is then
//! done, the relay's listening socket is created there (a socket stays in the
//! namespace it was made in, whichever thread accepts), and the command joins
//! the namespace between fork and exec (`setns`). A tool that ignores the
//! proxy variables reaches nothing: there is no route out but the relay.

use base64::Engine as _;
use secrecy::{ExposeSecret, SecretString};
use std::os::fd::OwnedFd;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Largest request head the relay reads.
const MAX_HEAD: usize = 64 * 1024;
/// Most connections the relay serves at once.
const MAX_CONNECTIONS: usize = 256;

/// The relay while it runs: the proxy URL for the command's environment and,
/// with `--isolate-net`, the namespace the command joins.
pub struct Egress {
    pub proxy_url: SecretString,
    pub netns: Option<OwnedFd>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Egress {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Egress {
    /// The proxy variables the command gets.
    pub fn environment(&self) -> Vec<(String, String)> {
        let url = self.proxy_url.expose_secret().to_owned();
        let mut vars = Vec::new();
        for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
            vars.push((name.to_owned(), url.clone()));
            vars.push((name.to_ascii_lowercase(), url.clone()));
        }
        // Nothing bypasses the gateway, loopback included.
        vars.push(("NO_PROXY".to_owned(), String::new()));
        vars.push(("no_proxy".to_owned(), String::new()));
        vars
    }
}

/// A network namespace with only loopback, up, and a listener on it.
fn isolated_listener() -> Result<(std::net::TcpListener, OwnedFd), String> {
    std::thread::spawn(|| {
        use nix::sched::{unshare, CloneFlags};
        unshare(CloneFlags::CLONE_NEWNET).map_err(|e| {
            format!("--isolate-net: cannot make a network namespace ({e}); it needs root (CAP_SYS_ADMIN)")
        })?;
        // Spawned from this thread, `ip` runs in the new namespace. Found at
        // the paths Debian and others install it, never through PATH (exec runs
        // as root, and PATH is the caller's).
        let ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .ok_or("--isolate-net: iproute2's ip is not installed (/usr/sbin/ip)")?;
        let up = std::process::Command::new(ip)
            .args(["link", "set", "lo", "up"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .status()
            .map_err(|e| format!("--isolate-net: cannot run `ip` (iproute2): {e}"))?;
        if !up.success() {
            return Err("--isolate-net: `ip link set lo up` failed in the namespace".to_owned());
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|e| format!("--isolate-net: cannot listen in the namespace: {e}"))?;
        let ns = std::fs::File::open("/proc/thread-self/ns/net")
            .map_err(|e| format!("--isolate-net: cannot open the namespace: {e}"))?;
        Ok((listener, OwnedFd::from(ns)))
    })
    .join()
    .map_err(|_| "--isolate-net: the namespace thread panicked".to_owned())?
}

/// Whether `gateway` (`HOST:PORT`) is on this machine: the run token crosses
/// to it in clear (the gateway speaks plain HTTP, as forward proxies do).
fn is_loopback(gateway: &str) -> bool {
    let host = gateway.rsplit_once(':').map_or(gateway, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// What the relay does when the gateway holds a request for a human approval
/// (`403 approval_pending`, `Tessera-Approval-Id`): it says so on stderr and,
/// for a request it can send again whole (a `CONNECT`, a request without a
/// body), waits up to `wait` for the decision (`--approval-wait`) and, once
/// approved, sends the identical request again, which then passes once.
#[derive(Clone)]
pub struct Approvals {
    pub client: tessera_client::Client,
    pub wait: Duration,
}

/// Starts the relay to `gateway` (`HOST:PORT`), presenting `authorization`
/// there for every request. A gateway off this machine is refused unless
/// `insecure` (`TESSERA_INSECURE_HTTP=1`): the run token would cross in clear.
pub fn start(
    gateway: &str,
    authorization: SecretString,
    isolate: bool,
    insecure: bool,
    approvals: Approvals,
) -> Result<Egress, String> {
    if !is_loopback(gateway) && !insecure {
        return Err(format!(
            "--egress {gateway}: the gateway is not on this machine, and the run token would cross \
             to it in clear; use a loopback address (or TESSERA_INSECURE_HTTP=1 on a network you trust)"
        ));
    }
    let (std_listener, netns) = if isolate {
        let (l, ns) = isolated_listener()?;
        (l, Some(ns))
    } else {
        let l = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|e| format!("--egress: cannot listen on loopback: {e}"))?;
        (l, None)
    };
    std_listener
        .set_nonblocking(true)
        .map_err(|e| format!("--egress: {e}"))?;
    let port = std_listener
        .local_addr()
        .map_err(|e| format!("--egress: {e}"))?
        .port();
    let listener = TcpListener::from_std(std_listener).map_err(|e| format!("--egress: {e}"))?;
    let secret = crate::ids::new_secret("tsr_px_");
    let proxy_url = SecretString::from(format!(
        "http://tessera:{}@127.0.0.1:{port}",
        secret.expose_secret()
    ));
    let expected = SecretString::from(
        base64::engine::general_purpose::STANDARD
            .encode(format!("tessera:{}", secret.expose_secret())),
    );
    let gateway = gateway.to_owned();
    let task = tokio::spawn(async move {
        let shared = std::sync::Arc::new((gateway, authorization, expected, approvals));
        let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        loop {
            let Ok((client, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                continue; // dropped: over MAX_CONNECTIONS
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                let (gateway, authorization, expected, approvals) = &*shared;
                let _ = relay(client, gateway, authorization, expected, approvals).await;
                drop(slot);
            });
        }
    });
    Ok(Egress {
        proxy_url,
        netns,
        task,
    })
}

/// Whether `value` (a `Proxy-Authorization` header) is this relay's credential.
fn is_ours(value: &str, expected: &SecretString) -> bool {
    use subtle::ConstantTimeEq;
    let Some(("Basic" | "basic", b64)) = value.trim().split_once(' ') else {
        return false;
    };
    b64.trim()
        .as_bytes()
        .ct_eq(expected.expose_secret().as_bytes())
        .into()
}

/// Serves one connection of the command's: reads its request head, refuses it
/// (407) without this relay's credential, and passes it on to the gateway
/// with the run's `Proxy-Authorization` instead.
async fn relay(
    mut client: TcpStream,
    gateway: &str,
    authorization: &SecretString,
    expected: &SecretString,
    approvals: &Approvals,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    let Some(head_end) = read_head(&mut client, &mut buf).await? else {
        client
            .write_all(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\n\
                  Content-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .await?;
        return Ok(());
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let Forward {
        request_line,
        is_connect,
        has_body,
        authorized,
        mut out,
    } = forward_head(&head, expected);
    if !authorized {
        client
            .write_all(
                b"HTTP/1.1 407 Proxy Authentication Required\r\n\
                  Proxy-Authenticate: Basic realm=\"tessera exec\"\r\n\
                  Content-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .await?;
        return Ok(());
    }
    out.push_str(&format!(
        "Proxy-Authorization: {}\r\n",
        authorization.expose_secret()
    ));
    if !is_connect {
        // One request per connection: the next one is authorised anew.
        out.push_str("Connection: close\r\n");
    }
    out.push_str("\r\n");
    let rest = &buf[head_end..];
    // The request line without its version, and without a query (which may
    // carry what the command would not print).
    let what = request_line
        .rsplit_once(' ')
        .map_or(request_line.as_str(), |(w, _)| w);
    let what = what.split('?').next().unwrap_or(what);
    if !(rest.is_empty() && (is_connect || !has_body)) {
        return pass_with_body(client, gateway, &out, rest, what).await;
    }
    send_until_decided(client, gateway, &out, what, approvals).await
}

/// Reads the command's request head into `buf`, within 30 seconds: where it
/// ends, or `None` when it is longer than [`MAX_HEAD`].
async fn read_head(client: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Option<usize>> {
    tokio::time::timeout(Duration::from_secs(30), async {
        let mut chunk = [0u8; 4096];
        let mut scanned = 0;
        loop {
            // Only what arrived since the last look (and the 3 bytes before it).
            if let Some(i) = buf[scanned..].windows(4).position(|w| w == b"\r\n\r\n") {
                return Ok(Some(scanned + i + 4));
            }
            scanned = buf.len().saturating_sub(3);
            if buf.len() > MAX_HEAD {
                return Ok(None);
            }
            let n = client.read(&mut chunk).await?;
            if n == 0 {
                return Err(std::io::Error::other("closed"));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .map_err(|_| std::io::Error::other("no request head in time"))?
}

/// A request head as the gateway gets it (before the run's credential and
/// the blank line are added), and what the relay needs to know about it.
struct Forward {
    request_line: String,
    is_connect: bool,
    has_body: bool,
    /// It carried this relay's credential.
    authorized: bool,
    /// The request line and the headers passed on: the command's
    /// `Proxy-Authorization` and the hop-by-hop headers are dropped.
    out: String,
}

fn forward_head(head: &str, expected: &SecretString) -> Forward {
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_owned();
    let is_connect = request_line.starts_with("CONNECT ");
    let mut authorized = false;
    let mut has_body = false;
    let mut out = format!("{request_line}\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let name = line
            .split(':')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        let value = line.split_once(':').map_or("", |(_, v)| v.trim());
        if name == "transfer-encoding" || (name == "content-length" && value != "0") {
            has_body = true;
        }
        match name.as_str() {
            "proxy-authorization" => {
                authorized = is_ours(line.split_once(':').map_or("", |(_, v)| v), expected);
            }
            "proxy-connection" | "connection" | "keep-alive" => {}
            _ => {
                out.push_str(line);
                out.push_str("\r\n");
            }
        }
    }
    Forward {
        request_line,
        is_connect,
        has_body,
        authorized,
        out,
    }
}

/// A body still coming: it flows while the answer is read, so the approval
/// can be shown but the request is not the relay's to resend.
async fn pass_with_body(
    client: TcpStream,
    gateway: &str,
    out: &str,
    rest: &[u8],
    what: &str,
) -> std::io::Result<()> {
    let mut upstream = TcpStream::connect(gateway).await?;
    upstream.set_nodelay(true)?;
    upstream.write_all(out.as_bytes()).await?;
    upstream.write_all(rest).await?;
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_gateway, mut to_gateway) = upstream.into_split();
    let up = async {
        let copied = tokio::io::copy(&mut from_client, &mut to_gateway).await;
        let _ = to_gateway.shutdown().await;
        copied
    };
    let down = async {
        let (answer, pending) = read_answer(&mut from_gateway).await?;
        if let Some(id) = &pending {
            eprintln!("tessera: the gateway holds {what} for approval {id}");
        }
        to_client.write_all(&answer).await?;
        tokio::io::copy(&mut from_gateway, &mut to_client).await?;
        to_client.shutdown().await
    };
    let (up, down) = tokio::join!(up, down);
    up?;
    down
}

/// The whole request is here: once approved, it is sent again as it was.
async fn send_until_decided(
    mut client: TcpStream,
    gateway: &str,
    out: &str,
    what: &str,
    approvals: &Approvals,
) -> std::io::Result<()> {
    let mut waited = false;
    loop {
        let mut upstream = TcpStream::connect(gateway).await?;
        upstream.set_nodelay(true)?;
        upstream.write_all(out.as_bytes()).await?;
        let (answer, pending) = read_answer(&mut upstream).await?;
        if let Some(id) = &pending {
            eprintln!("tessera: the gateway holds {what} for approval {id}");
            if !waited && !approvals.wait.is_zero() {
                waited = true;
                if wait_for(approvals, id).await {
                    continue;
                }
            }
        }
        client.write_all(&answer).await?;
        tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
        return Ok(());
    }
}

/// Reads the gateway's answer head (and what came with it), with no deadline
/// of its own (the gateway bounds how long an upstream may take); the approval
/// it names when it is a `403` holding the request for one. A head longer than
/// [`MAX_HEAD`] is passed on unread.
async fn read_answer(
    upstream: &mut (impl tokio::io::AsyncRead + Unpin),
) -> std::io::Result<(Vec<u8>, Option<String>)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut scanned = 0;
    let end = loop {
        if let Some(i) = buf[scanned..].windows(4).position(|w| w == b"\r\n\r\n") {
            break scanned + i + 4;
        }
        scanned = buf.len().saturating_sub(3);
        if buf.len() > MAX_HEAD {
            return Ok((buf, None));
        }
        let n = upstream.read(&mut chunk).await?;
        if n == 0 {
            return Ok((buf, None));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.split("\r\n");
    let refused = lines
        .next()
        .is_some_and(|l| l.split(' ').nth(1) == Some("403"));
    let id = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("tessera-approval-id"))
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| v.len() == 36 && v.bytes().all(|c| c.is_ascii_hexdigit() || c == b'-'));
    Ok((buf, id.filter(|_| refused)))
}

/// Waits for approval `id`, saying on stderr how it stands; whether it was approved.
async fn wait_for(approvals: &Approvals, id: &str) -> bool {
    let say = |a: &tessera_client::types::Approval| {
        eprintln!(
            "tessera: approval {} for {} on {} is {} (expires {})",
            a.approval_id,
            a.action,
            a.resource,
            a.status.as_str(),
            a.expires_at
        );
    };
    match approvals
        .client
        .wait_for_approval(id, approvals.wait, Some(&say))
        .await
    {
        Ok(a) => a.status == tessera_client::types::ApprovalStatus::Approved,
        Err(e) => {
            eprintln!("tessera: cannot wait for approval {id}: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_must_be_on_this_machine() {
        for ok in [
            "127.0.0.1:8701",
            "localhost:8701",
            "[::1]:8701",
            "127.9.9.9:1",
        ] {
            assert!(is_loopback(ok), "{ok}");
        }
        for bad in [
            "10.0.0.1:8701",
            "gateway.internal:8701",
            "localhost.evil:1",
            "[::2]:1",
        ] {
            assert!(!is_loopback(bad), "{bad}");
        }
    }

    #[test]
    fn only_this_relays_credential_is_accepted() {
        let expected = SecretString::from("dGVzc2VyYTpzZWNyZXQ=".to_owned());
        assert!(is_ours(" Basic dGVzc2VyYTpzZWNyZXQ=", &expected));
        assert!(!is_ours("Basic dGVzc2VyYTpzZWNyZXR=", &expected));
        assert!(!is_ours("Bearer dGVzc2VyYTpzZWNyZXQ=", &expected));
        assert!(!is_ours("", &expected));
    }
}
