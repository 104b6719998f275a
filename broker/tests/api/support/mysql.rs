//! A MariaDB fixture of its own for each test: databases and accounts under a
//! random prefix on the machine's server, removed at the end, and a root pool
//! to inspect with.

use crate::support::app::mysql_url;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};

/// ER_TABLEACCESS_DENIED_ERROR, ER_DBACCESS_DENIED_ERROR.
pub const DENIED: [u16; 2] = [1142, 1044];

pub struct MyFixture {
    pub admin: MySqlPool,
    pub prefix: String,
    _guard: Guard,
}

/// Tests that count every account ([`MyFixture::exclusive`]) run alone.
static ACCOUNTS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Held, never read: it is the lock.
#[allow(dead_code)]
pub enum Guard {
    Shared(tokio::sync::RwLockReadGuard<'static, ()>),
    Exclusive(tokio::sync::RwLockWriteGuard<'static, ()>),
}

impl MyFixture {
    pub async fn new() -> MyFixture {
        Self::with_guard(Guard::Shared(ACCOUNTS.read().await)).await
    }

    pub async fn exclusive() -> MyFixture {
        Self::with_guard(Guard::Exclusive(ACCOUNTS.write().await)).await
    }

    async fn with_guard(guard: Guard) -> MyFixture {
        let admin = MySqlPoolOptions::new()
            .max_connections(2)
            .connect(&mysql_url())
            .await
            .expect("MariaDB on 127.0.0.1:3306 (see .ci/run)");
        let prefix = format!(
            "tsr_t_{}",
            tessera_broker::ids::hex(&tessera_broker::ids::random_bytes::<6>())
        );
        let p = &prefix;
        for sql in [
            format!("CREATE TABLE test.{p}_granted (id int, v text)"),
            format!("INSERT INTO test.{p}_granted VALUES (1, 'a')"),
            format!("CREATE TABLE test.{p}_other (id int)"),
            format!("CREATE DATABASE {p}_b"),
            format!("CREATE TABLE {p}_b.{p}_granted (id int)"),
        ] {
            sqlx::raw_sql(&sql).execute(&admin).await.unwrap();
        }
        MyFixture {
            admin,
            prefix,
            _guard: guard,
        }
    }

    pub fn resource(&self, table: &str) -> String {
        format!("my-test:test.{}_{table}", self.prefix)
    }

    pub fn table(&self, table: &str) -> String {
        format!("test.{}_{table}", self.prefix)
    }

    pub async fn user_exists(&self, name: &str) -> bool {
        sqlx::query("SELECT 1 FROM mysql.user WHERE User = ?")
            .bind(name)
            .fetch_optional(&self.admin)
            .await
            .unwrap()
            .is_some()
    }

    pub async fn account_count(&self) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM mysql.user")
            .fetch_one(&self.admin)
            .await
            .unwrap()
    }

    pub async fn cleanup(self) {
        let p = &self.prefix;
        for sql in [
            format!("DROP TABLE test.{p}_granted, test.{p}_other"),
            format!("DROP DATABASE {p}_b"),
        ] {
            sqlx::raw_sql(&sql).execute(&self.admin).await.unwrap();
        }
    }
}
