//! The writer's statements, run on whichever connection the batch holds.
//!
//! Why: on SQLite, sqlx runs every statement on a worker thread of its own and
//! hands each result back through a channel; a profile of issuance put about
//! 67 µs per request in that thread and 18 µs more in the async side of sqlx's
//! `Any` driver (issue 20). So the writer on SQLite owns a native connection
//! (rusqlite, prepared statements cached per connection) on a thread of its
//! own, while PostgreSQL keeps sqlx. Every write op is written once, against
//! [`Stmt`]: bind values, then `execute`, `fetch_optional`, `fetch_one` or
//! `fetch_all` on the batch's [`Conn`].
//!
//! Errors stay `sqlx::Error`: a SQLite error from the native connection becomes
//! a `sqlx::Error::Database` carrying SQLite's extended result code and its
//! constraint kind ([`NativeError`]), so the writer's classification (a conflict
//! is a 409, a full disk or an I/O error drops the connection) reads both
//! drivers' errors the same way.

use rusqlite::types::{FromSql, ToSqlOutput, Value, ValueRef};
use sqlx::error::{DatabaseError, ErrorKind};
use std::borrow::Cow;
use std::sync::Arc;

/// Distinct statements the writer's connection keeps prepared, on either
/// store. Multi-row statements have one text per row count
/// (1..=`ROWS_PER_INSERT`): the audit, capability and rate-limit INSERTs and
/// the run and bucket lookups are five such families, 250 texts in all, beside
/// the fixed statements of the other ops (about 80 call sites). The cache holds
/// them all, so that a batch never prepares a statement it ran before: on
/// PostgreSQL, sqlx's default of 100 evicted them in turn, and the server spent
/// about a fifth of its CPU per issuance parsing and planning them again
/// (issue 20, docs/performance.md).
pub const WRITER_STATEMENT_CACHE: usize = 512;
/// More than the writer's fixed statements (texts that do not vary with a row count).
const FIXED_STATEMENTS_BOUND: usize = 128;
const _: () =
    assert!(WRITER_STATEMENT_CACHE >= 5 * super::sql::ROWS_PER_INSERT + FIXED_STATEMENTS_BOUND);

/// The connection a write batch runs on.
pub enum Conn<'c> {
    Sqlx(&'c mut sqlx::AnyConnection),
    Native(&'c mut rusqlite::Connection),
}

/// One bound value, typed even when null (PostgreSQL infers parameter types).
/// No `Debug`: bound values include sealed keys and tokens.
pub enum Arg<'q> {
    Int(Option<i64>),
    Text(Option<Cow<'q, str>>),
    Bool(Option<bool>),
}

/// A value that can be bound to a [`Stmt`].
pub trait Bind<'q> {
    fn arg(self) -> Arg<'q>;
}

impl<'q> Bind<'q> for i64 {
    fn arg(self) -> Arg<'q> {
        Arg::Int(Some(self))
    }
}
impl<'q> Bind<'q> for Option<i64> {
    fn arg(self) -> Arg<'q> {
        Arg::Int(self)
    }
}
impl<'q> Bind<'q> for &'q Option<i64> {
    fn arg(self) -> Arg<'q> {
        Arg::Int(*self)
    }
}
impl<'q> Bind<'q> for bool {
    fn arg(self) -> Arg<'q> {
        Arg::Bool(Some(self))
    }
}
impl<'q> Bind<'q> for &'q str {
    fn arg(self) -> Arg<'q> {
        Arg::Text(Some(Cow::Borrowed(self)))
    }
}
impl<'q> Bind<'q> for &'q String {
    fn arg(self) -> Arg<'q> {
        Arg::Text(Some(Cow::Borrowed(self)))
    }
}
impl<'q> Bind<'q> for String {
    fn arg(self) -> Arg<'q> {
        Arg::Text(Some(Cow::Owned(self)))
    }
}
impl<'q> Bind<'q> for Option<String> {
    fn arg(self) -> Arg<'q> {
        Arg::Text(self.map(Cow::Owned))
    }
}
impl<'q> Bind<'q> for Option<&'q str> {
    fn arg(self) -> Arg<'q> {
        Arg::Text(self.map(Cow::Borrowed))
    }
}
impl<'q> Bind<'q> for &'q Option<String> {
    fn arg(self) -> Arg<'q> {
        Arg::Text(self.as_deref().map(Cow::Borrowed))
    }
}
impl<'q> Bind<'q> for Option<&'q String> {
    fn arg(self) -> Arg<'q> {
        Arg::Text(self.map(|s| Cow::Borrowed(s.as_str())))
    }
}

/// What `execute` did.
#[derive(Debug, Clone, Copy)]
pub struct Done {
    rows: u64,
}

impl Done {
    pub fn rows_affected(&self) -> u64 {
        self.rows
    }
}

/// A column type both drivers decode the same way.
pub trait Column:
    for<'r> sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any> + FromSql + Send
{
}
impl<T> Column for T where
    T: for<'r> sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any> + FromSql + Send
{
}

/// A row read in the writer's transaction.
pub enum Row {
    Sqlx(sqlx::any::AnyRow),
    Native(NativeRow),
}

/// A row read natively: its values and the statement's column names.
pub struct NativeRow {
    names: Arc<[String]>,
    values: Vec<Owned>,
}

/// A column's value as read, text kept as bytes: a stored value that is not
/// UTF-8 becomes a decode error when its column is read (as with sqlx), not
/// a panic on the writer's thread when the row is copied (rusqlite's
/// `Value::from(ValueRef)` panics on such text).
enum Owned {
    Null,
    Integer(i64),
    Real(f64),
    Text(Vec<u8>),
    Blob(Vec<u8>),
}

impl Owned {
    fn copy(v: ValueRef<'_>) -> Owned {
        match v {
            ValueRef::Null => Owned::Null,
            ValueRef::Integer(i) => Owned::Integer(i),
            ValueRef::Real(r) => Owned::Real(r),
            ValueRef::Text(t) => Owned::Text(t.to_vec()),
            ValueRef::Blob(b) => Owned::Blob(b.to_vec()),
        }
    }

    fn get(&self) -> ValueRef<'_> {
        match self {
            Owned::Null => ValueRef::Null,
            Owned::Integer(i) => ValueRef::Integer(*i),
            Owned::Real(r) => ValueRef::Real(*r),
            Owned::Text(t) => ValueRef::Text(t),
            Owned::Blob(b) => ValueRef::Blob(b),
        }
    }
}

impl Row {
    /// The column `name`, decoded as `T`.
    pub fn try_get<T: Column>(&self, name: &str) -> Result<T, sqlx::Error> {
        match self {
            Row::Sqlx(row) => sqlx::Row::try_get(row, name),
            Row::Native(row) => {
                let i = row
                    .names
                    .iter()
                    .position(|n| n == name)
                    .ok_or_else(|| sqlx::Error::ColumnNotFound(name.to_owned()))?;
                let value = row.values[i].get();
                T::column_result(value).map_err(|e| sqlx::Error::ColumnDecode {
                    index: name.to_owned(),
                    source: Box::new(e),
                })
            }
        }
    }
}

/// Rows of either kind, read by column name: what row-to-record functions
/// shared by reads (the pool's `AnyRow`) and writes ([`Row`]) take.
pub trait Columns {
    fn column<T: Column>(&self, name: &str) -> Result<T, sqlx::Error>;
}

impl Columns for sqlx::any::AnyRow {
    fn column<T: Column>(&self, name: &str) -> Result<T, sqlx::Error> {
        sqlx::Row::try_get(self, name)
    }
}

impl Columns for Row {
    fn column<T: Column>(&self, name: &str) -> Result<T, sqlx::Error> {
        self.try_get(name)
    }
}

/// A statement and its bound values.
pub struct Stmt<'q> {
    sql: &'q str,
    args: Vec<Arg<'q>>,
}

/// A statement to run in the writer's transaction (`$n`/`?n` placeholders as
/// the batch's dialect spells them).
pub fn stmt(sql: &str) -> Stmt<'_> {
    Stmt {
        sql,
        args: Vec::new(),
    }
}

impl<'q> Stmt<'q> {
    pub fn bind(mut self, value: impl Bind<'q>) -> Self {
        self.args.push(value.arg());
        self
    }

    /// Binds each of `values` in order: the members of an `IN` list.
    pub fn bind_all<V: Bind<'q>>(self, values: impl IntoIterator<Item = V>) -> Self {
        values.into_iter().fold(self, Stmt::bind)
    }

    /// Runs a statement that returns no rows.
    pub async fn execute(self, conn: &mut Conn<'_>) -> Result<Done, sqlx::Error> {
        match conn {
            Conn::Sqlx(c) => {
                let done = sqlx::Executor::execute(&mut **c, self.sqlx()).await?;
                Ok(Done {
                    rows: done.rows_affected(),
                })
            }
            Conn::Native(c) => {
                let mut st = self.prepare(c)?;
                if st.column_count() == 0 {
                    let rows = st.raw_execute().map_err(native)?;
                    return Ok(Done { rows: rows as u64 });
                }
                // A statement that returns rows (RETURNING) runs to its end, as
                // sqlx's `execute` does, its rows unread.
                let mut rows = st.raw_query();
                while rows.next().map_err(native)?.is_some() {}
                drop(rows);
                drop(st);
                Ok(Done { rows: c.changes() })
            }
        }
    }

    /// Every row the statement returns.
    pub async fn fetch_all(self, conn: &mut Conn<'_>) -> Result<Vec<Row>, sqlx::Error> {
        match conn {
            Conn::Sqlx(c) => Ok(sqlx::Executor::fetch_all(&mut **c, self.sqlx())
                .await?
                .into_iter()
                .map(Row::Sqlx)
                .collect()),
            Conn::Native(c) => {
                let mut st = self.prepare(c)?;
                let names: Arc<[String]> =
                    st.column_names().iter().map(|n| n.to_string()).collect();
                let width = names.len();
                let mut rows = st.raw_query();
                let mut out = Vec::new();
                while let Some(row) = rows.next().map_err(native)? {
                    let mut values = Vec::with_capacity(width);
                    for i in 0..width {
                        values.push(Owned::copy(row.get_ref(i).map_err(native)?));
                    }
                    out.push(Row::Native(NativeRow {
                        names: names.clone(),
                        values,
                    }));
                }
                Ok(out)
            }
        }
    }

    /// The first row, if any (a statement that returns more is a bug in the
    /// query, not data: the rest are not read).
    pub async fn fetch_optional(self, conn: &mut Conn<'_>) -> Result<Option<Row>, sqlx::Error> {
        match conn {
            Conn::Sqlx(c) => Ok(sqlx::Executor::fetch_optional(&mut **c, self.sqlx())
                .await?
                .map(Row::Sqlx)),
            Conn::Native(_) => Ok(self.fetch_all(conn).await?.into_iter().next()),
        }
    }

    /// The first row; `RowNotFound` when there is none.
    pub async fn fetch_one(self, conn: &mut Conn<'_>) -> Result<Row, sqlx::Error> {
        self.fetch_optional(conn)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }

    fn sqlx(&self) -> sqlx::query::Query<'_, sqlx::Any, sqlx::any::AnyArguments<'_>> {
        let mut query = sqlx::query(self.sql);
        for arg in &self.args {
            query = match arg {
                Arg::Int(v) => query.bind(*v),
                Arg::Text(v) => query.bind(v.as_deref()),
                Arg::Bool(v) => query.bind(*v),
            };
        }
        query
    }

    /// The statement prepared (from the connection's cache) with its values bound.
    fn prepare<'c>(
        &self,
        conn: &'c rusqlite::Connection,
    ) -> Result<rusqlite::CachedStatement<'c>, sqlx::Error> {
        let mut st = conn.prepare_cached(self.sql).map_err(native)?;
        let expected = st.parameter_count();
        if expected != self.args.len() {
            // Fail closed, as sqlx does: a statement never runs with a value missing.
            return Err(sqlx::Error::Protocol(format!(
                "statement takes {expected} values, {} were bound",
                self.args.len()
            )));
        }
        for (i, arg) in self.args.iter().enumerate() {
            let value = match arg {
                Arg::Int(Some(v)) => ToSqlOutput::Owned(Value::Integer(*v)),
                Arg::Bool(Some(v)) => ToSqlOutput::Owned(Value::Integer(i64::from(*v))),
                Arg::Text(Some(v)) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
                Arg::Int(None) | Arg::Bool(None) | Arg::Text(None) => {
                    ToSqlOutput::Owned(Value::Null)
                }
            };
            st.raw_bind_parameter(i + 1, value).map_err(native)?;
        }
        Ok(st)
    }
}

/// Runs `sql` (no values) on a native connection, reading and dropping any rows
/// it returns (`PRAGMA journal_mode = WAL` answers with one).
pub fn native_exec(conn: &rusqlite::Connection, sql: &str) -> Result<(), sqlx::Error> {
    let mut st = conn.prepare_cached(sql).map_err(native)?;
    let mut rows = st.raw_query();
    while rows.next().map_err(native)?.is_some() {}
    Ok(())
}

/// A native SQLite error as sqlx reports SQLite's own.
pub fn native(e: rusqlite::Error) -> sqlx::Error {
    match e {
        rusqlite::Error::SqliteFailure(failure, message) => {
            sqlx::Error::Database(Box::new(NativeError {
                code: failure.extended_code,
                message: message.unwrap_or_else(|| failure.to_string()),
            }))
        }
        other => sqlx::Error::Protocol(format!("sqlite: {other}")),
    }
}

/// A SQLite error from the native connection: its extended result code and message.
#[derive(Debug)]
pub struct NativeError {
    code: i32,
    message: String,
}

impl std::fmt::Display for NativeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "(code: {}) {}", self.code, self.message)
    }
}

impl std::error::Error for NativeError {}

impl DatabaseError for NativeError {
    fn message(&self) -> &str {
        &self.message
    }

    /// The extended result code, as sqlx's SQLite driver reports it.
    fn code(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Owned(self.code.to_string()))
    }

    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }

    fn kind(&self) -> ErrorKind {
        use rusqlite::ffi;
        match self.code {
            ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
                ErrorKind::UniqueViolation
            }
            ffi::SQLITE_CONSTRAINT_FOREIGNKEY => ErrorKind::ForeignKeyViolation,
            ffi::SQLITE_CONSTRAINT_NOTNULL => ErrorKind::NotNullViolation,
            ffi::SQLITE_CONSTRAINT_CHECK => ErrorKind::CheckViolation,
            _ => ErrorKind::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored text value that is not UTF-8 (anyone with the file can write
    /// one) is a decode error for its column, as on sqlx, never a panic on
    /// the writer's thread, and the row's other columns still read.
    #[tokio::test]
    async fn text_that_is_not_utf8_is_a_decode_error_not_a_panic() {
        let mut c = rusqlite::Connection::open_in_memory().unwrap();
        native_exec(&c, "CREATE TABLE t (a TEXT, b INTEGER)").unwrap();
        native_exec(&c, "INSERT INTO t VALUES (CAST(x'ff00fe' AS TEXT), 7)").unwrap();
        let row = stmt("SELECT a, b FROM t")
            .fetch_one(&mut Conn::Native(&mut c))
            .await
            .expect("the row is read");
        let err = row.try_get::<String>("a").unwrap_err();
        assert!(matches!(err, sqlx::Error::ColumnDecode { .. }), "{err:?}");
        assert_eq!(row.try_get::<i64>("b").unwrap(), 7);
    }

    /// `execute` on a statement that returns rows runs it to its end and
    /// counts its changes, as sqlx does, instead of refusing it.
    #[tokio::test]
    async fn execute_runs_a_statement_that_returns_rows() {
        let mut c = rusqlite::Connection::open_in_memory().unwrap();
        native_exec(&c, "CREATE TABLE t (a INTEGER)").unwrap();
        let done = stmt("INSERT INTO t VALUES (1), (2) RETURNING a")
            .execute(&mut Conn::Native(&mut c))
            .await
            .expect("runs");
        assert_eq!(done.rows, 2);
        let n: i64 = c
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2);
    }
}
