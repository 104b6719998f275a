//! A DNS server on loopback (UDP) that answers A and AAAA queries from a table
//! the test controls, with TTL 0, and counts the queries: how the gateway tests
//! make names resolve to loopback, private, link-local and metadata addresses
//! — and change their answer between two connections (rebinding) — without any
//! traffic leaving the machine. Real DNS on the wire, through hickory's codec.

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use tokio::net::UdpSocket;

/// Answers by name (lower case, no root dot): each lookup takes the next list
/// of addresses; the last one repeats.
type Table = HashMap<String, (Vec<Vec<IpAddr>>, usize)>;

pub struct Dns {
    pub addr: SocketAddr,
    table: Arc<Mutex<Table>>,
    task: tokio::task::JoinHandle<()>,
}

impl Dns {
    pub async fn start() -> Dns {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let table: Arc<Mutex<Table>> = Arc::default();
        let t = table.clone();
        let task = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                    return;
                };
                if let Some(answer) = answer(&t, &buf[..n]) {
                    let _ = socket.send_to(&answer, from).await;
                }
            }
        });
        Dns { addr, table, task }
    }

    /// `name` resolves to `answers[0]` first, then `answers[1]`, … (the last repeats).
    pub fn set(&self, name: &str, answers: Vec<Vec<&str>>) {
        let parsed = answers
            .into_iter()
            .map(|a| a.into_iter().map(|ip| ip.parse().unwrap()).collect())
            .collect();
        self.table
            .lock()
            .unwrap()
            .insert(name.to_owned(), (parsed, 0));
    }
}

impl Drop for Dns {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn answer(table: &Mutex<Table>, query: &[u8]) -> Option<Vec<u8>> {
    let query = Message::from_vec(query).ok()?;
    let q = query.queries.first()?.clone();
    let name = q
        .name()
        .to_ascii()
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let mut resp = Message::new(
        query.metadata.id,
        MessageType::Response,
        query.metadata.op_code,
    );
    resp.metadata.recursion_desired = query.metadata.recursion_desired;
    resp.metadata.recursion_available = true;
    resp.metadata.authoritative = true;
    resp.add_query(q.clone());
    let mut table = table.lock().unwrap();
    let Some((answers, next)) = table.get_mut(&name) else {
        resp.metadata.response_code = ResponseCode::NXDomain;
        return resp.to_vec().ok();
    };
    let ips = answers[(*next).min(answers.len() - 1)].clone();
    // One lookup asks for A and AAAA: the answer moves on after the A query.
    if q.query_type() == RecordType::A {
        *next += 1;
    }
    for ip in ips {
        let rdata = match (ip, q.query_type()) {
            (IpAddr::V4(v4), RecordType::A) => RData::A(A(v4)),
            (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(v6)),
            _ => continue,
        };
        resp.add_answer(Record::from_rdata(q.name().clone(), 0, rdata));
    }
    resp.to_vec().ok()
}
