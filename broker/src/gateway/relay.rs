//! Moving bytes for an allowed connection, counted and bounded: the run's byte
//! allowance each way, the connection's longest life, and the run's cut signal
//! (the run ended) all stop it, and the reason goes into its `egress.closed` row.

use super::traffic::{Conn, Cut};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

const BUF: usize = 64 * 1024;

/// Copies `from` to `to` until `from` ends, counting each chunk with `count`;
/// `Err(Some(cut))` when the count refuses a chunk (it is not written).
async fn pump<R, W>(
    mut from: R,
    mut to: W,
    count: impl Fn(usize) -> bool,
) -> Result<(), Option<Cut>>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUF];
    loop {
        let n = from.read(&mut buf).await.map_err(|_| None)?;
        if n == 0 {
            let _ = to.shutdown().await;
            return Ok(());
        }
        if !count(n) {
            return Err(Some(Cut::ByteLimit));
        }
        to.write_all(&buf[..n]).await.map_err(|_| None)?;
    }
}

/// Relays between the client and the upstream until both sides are done or a
/// limit cuts the connection.
pub async fn relay<C, U>(client: C, upstream: U, conn: &Conn, max_duration: Duration)
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (client_r, client_w) = tokio::io::split(client);
    let (up_r, up_w) = tokio::io::split(upstream);
    let mut ended = conn.run().cut_signal();
    let both = async {
        tokio::try_join!(
            pump(client_r, up_w, |n| conn.add_up(n)),
            pump(up_r, client_w, |n| conn.add_down(n)),
        )
    };
    tokio::select! {
        done = both => {
            if let Err(Some(cut)) = done {
                conn.cut(cut);
            }
        }
        _ = tokio::time::sleep(max_duration) => conn.cut(Cut::DurationLimit),
        _ = ended.wait_for(|cut| *cut) => conn.cut(Cut::RunEnded),
    }
}
