//! Private PostgreSQL clusters, started by the tests themselves.
//!
//! Why not the machine's server on 127.0.0.1:5432: it trusts every loopback
//! connection (so a login proves nothing about a password), it is shared (a
//! test must not revoke PUBLIC's defaults on it), it has prepared transactions
//! off, and it is version 15 only. Each cluster here is `initdb`'d into
//! `/var/tmp`, with SCRAM password authentication for every connection,
//! `max_prepared_transactions = 4`, fsync off, listening on 127.0.0.1 and a
//! free port only. Binaries come from `scripts/postgres.sh` (15: Debian's; 17:
//! a pinned build from the npm registry); a missing one fails the test.
//!
//! One cluster per version per test binary, started on first use by
//! `scripts/postgres.sh serve`, which stops the server and removes its data
//! directory once the test binary is gone (it watches the binary's pid).

use sqlx::postgres::{PgPool, PgPoolOptions};
use std::path::PathBuf;
use std::process::Command;
use tokio::sync::OnceCell;

pub struct Cluster {
    pub version: u32,
    pub port: u16,
    superuser_password: String,
    /// `scripts/postgres.sh serve`, held for as long as the binary runs.
    _server: std::process::Child,
}

static PG15: OnceCell<Cluster> = OnceCell::const_new();
static PG17: OnceCell<Cluster> = OnceCell::const_new();

/// The private cluster of `version` (15 or 17), started on first use.
pub async fn cluster(version: u32) -> &'static Cluster {
    let cell = match version {
        15 => &PG15,
        17 => &PG17,
        v => panic!("no private PostgreSQL {v}"),
    };
    cell.get_or_init(|| async move {
        tokio::task::spawn_blocking(move || start(version))
            .await
            .expect("cluster start")
    })
    .await
}

impl Cluster {
    /// A superuser URL for `database`.
    pub fn superuser_url(&self, database: &str) -> String {
        self.url("tsr_admin", &self.superuser_password, database)
    }

    pub fn url(&self, user: &str, password: &str, database: &str) -> String {
        format!(
            "postgres://{user}:{password}@127.0.0.1:{}/{database}",
            self.port
        )
    }

    /// A superuser pool on `database`; waits while the server is starting up.
    pub async fn superuser(&self, database: &str) -> PgPool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            match PgPoolOptions::new()
                .max_connections(2)
                .connect(&self.superuser_url(database))
                .await
            {
                Ok(pool) => return pool,
                Err(e) if std::time::Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => panic!("private PostgreSQL {}: {e}", self.version),
            }
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start(version: u32) -> Cluster {
    let root = PathBuf::from("/var/tmp/tessera-test-clusters");
    std::fs::create_dir_all(&root).unwrap();
    let dir = root.join(format!(
        "pg{version}-{}-{}",
        std::process::id(),
        tessera_broker::ids::hex(&tessera_broker::ids::random_bytes::<4>())
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let password = tessera_broker::ids::hex(&tessera_broker::ids::random_bytes::<16>());
    std::fs::write(dir.join("pw"), &password).unwrap();
    let port = free_port();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/postgres.sh");
    // Never waited for: it runs until this test binary is gone (see the script).
    let server = Command::new(script)
        .arg("serve")
        .arg(version.to_string())
        .arg(&dir)
        .arg(port.to_string())
        .arg(std::process::id().to_string())
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("scripts/postgres.sh serve");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "PostgreSQL {version} did not start: {}{}",
            std::fs::read_to_string(dir.join("initdb.log")).unwrap_or_default(),
            std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Cluster {
        version,
        port,
        superuser_password: password,
        _server: server,
    }
}
