//! A PostgreSQL fixture of its own for each test: schemas in the `postgres`
//! database of the machine's server, dropped (with the group roles they
//! caused) at the end, and a superuser pool to inspect with.

use crate::support::app::pg_url;
use sqlx::postgres::{PgPool, PgPoolOptions};
use tessera_broker::backends::database::{
    group_name, parse_path, schema_group_name, DbKind, Privilege,
};

/// A schema pair of this test's own, and a superuser pool to inspect with.
pub struct PgFixture {
    pub admin: PgPool,
    pub schema: String,
    _guard: Guard,
}

/// Tests that count every role on the server ([`PgFixture::exclusive`]) run
/// alone; the others share. Without it, a parallel test creating roles would
/// make "nothing was created" flaky.
static ROLES: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Held, never read: it is the lock.
#[allow(dead_code)]
pub enum Guard {
    Shared(tokio::sync::RwLockReadGuard<'static, ()>),
    Exclusive(tokio::sync::RwLockWriteGuard<'static, ()>),
}

pub const SQLSTATE_PERMISSION_DENIED: &str = "42501";

impl PgFixture {
    pub async fn new() -> PgFixture {
        Self::with_guard(Guard::Shared(ROLES.read().await)).await
    }

    /// A fixture whose test may count every role: no other runs meanwhile.
    pub async fn exclusive() -> PgFixture {
        Self::with_guard(Guard::Exclusive(ROLES.write().await)).await
    }

    async fn with_guard(guard: Guard) -> PgFixture {
        let admin = PgPoolOptions::new()
            .max_connections(2)
            .connect(&pg_url())
            .await
            .expect("PostgreSQL on 127.0.0.1:5432 (see .ci/run)");
        let schema = format!(
            "tsr_t_{}",
            tessera_broker::ids::hex(&tessera_broker::ids::random_bytes::<6>())
        );
        let s = &schema;
        sqlx::raw_sql(&format!(
            "CREATE SCHEMA {s}; CREATE SCHEMA {s}_b;
             CREATE TABLE {s}.granted (id int, v text); INSERT INTO {s}.granted VALUES (1, 'a');
             CREATE TABLE {s}.other (id int); INSERT INTO {s}.other VALUES (2);
             CREATE TABLE {s}_b.granted (id int); INSERT INTO {s}_b.granted VALUES (3);"
        ))
        .execute(&admin)
        .await
        .unwrap();
        PgFixture {
            admin,
            schema,
            _guard: guard,
        }
    }

    pub fn resource(&self, table: &str) -> String {
        format!("pg-test:postgres.{}.{table}", self.schema)
    }

    pub async fn role_exists(&self, name: &str) -> bool {
        sqlx::query("SELECT 1 FROM pg_roles WHERE rolname = $1")
            .bind(name)
            .fetch_optional(&self.admin)
            .await
            .unwrap()
            .is_some()
    }

    pub async fn login_role_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM pg_roles WHERE rolcanlogin")
            .fetch_one(&self.admin)
            .await
            .unwrap()
    }

    pub async fn role_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM pg_roles")
            .fetch_one(&self.admin)
            .await
            .unwrap()
    }

    /// Drops the schemas and every group role this fixture's tables caused (the
    /// database's group, `tsr_d_…`, is shared by every test and stays).
    pub async fn cleanup(self) {
        let s = &self.schema;
        let mut groups = vec![];
        for schema in [s.clone(), format!("{s}_b")] {
            groups.push(schema_group_name("postgres", &schema));
            for table in ["granted", "other", "no_such_table", "*"] {
                let path = parse_path(
                    DbKind::Postgres,
                    &format!("postgres.{schema}.{table}"),
                    true,
                )
                .unwrap();
                for p in [
                    Privilege::Select,
                    Privilege::Insert,
                    Privilege::Update,
                    Privilege::Delete,
                ] {
                    groups.push(group_name(DbKind::Postgres, &path, p));
                }
            }
        }
        sqlx::raw_sql(&format!(
            "DROP SCHEMA {s} CASCADE; DROP SCHEMA {s}_b CASCADE;"
        ))
        .execute(&self.admin)
        .await
        .unwrap();
        let existing: Vec<String> =
            sqlx::query_scalar("SELECT rolname::text FROM pg_roles WHERE rolname = ANY($1)")
                .bind(&groups)
                .fetch_all(&self.admin)
                .await
                .unwrap();
        for g in existing {
            let drop = format!("DROP OWNED BY \"{g}\"; DROP ROLE \"{g}\";");
            // Another test may be granting on the same catalog row right now.
            for attempt in 0.. {
                match sqlx::raw_sql(&drop).execute(&self.admin).await {
                    Ok(_) => break,
                    Err(e) if attempt < 5 && e.to_string().contains("concurrently") => {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
    }
}
