//! A TCP proxy on loopback that a test can cut and restore: how a test makes a
//! real database server "go down" without stopping a server other tests share.

use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct Proxy {
    pub port: u16,
    target: SocketAddr,
    task: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Starts forwarding a fresh loopback port to `target`.
    pub async fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target: SocketAddr = target.parse().unwrap();
        Proxy {
            port,
            target,
            task: Some(tokio::spawn(serve(listener, target))),
        }
    }

    /// Closes the port and every connection through it: the server is "down"
    /// (new connections are refused, open ones break).
    pub async fn cut(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// Listens on the same port again: the server is "back".
    pub async fn restore(&mut self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).await.unwrap();
        self.task = Some(tokio::spawn(serve(listener, self.target)));
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn serve(listener: TcpListener, target: SocketAddr) {
    // Connection tasks live in this set and are aborted with it when cut.
    let mut conns = tokio::task::JoinSet::new();
    loop {
        if let Ok((mut inbound, _)) = listener.accept().await {
            conns.spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    }
}
