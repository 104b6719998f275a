//! The two SQL dialects, and the small text helpers that tell them apart.
//!
//! Why one module: queries are written once, in PostgreSQL's `$n` style, and
//! rewritten for SQLite; the few that are assembled at run time (multi-row
//! inserts, IN lists, filters) build their placeholders here. Nothing else in
//! the store knows how the dialects differ in spelling.

use std::borrow::Cow;

/// Rows per multi-row INSERT (bounded so statement variants stay few).
pub const ROWS_PER_INSERT: usize = 50;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// Static SQL for `dialect`: `$n` placeholders as written (PostgreSQL), or
/// `?n` (SQLite, which numbers them the same way).
pub fn sql_for(dialect: Dialect, q: &'static str) -> Cow<'static, str> {
    match dialect {
        Dialect::Postgres => Cow::Borrowed(q),
        Dialect::Sqlite => Cow::Owned(q.replace('$', "?")),
    }
}

/// The `n`-th bind placeholder, for SQL assembled at run time (filters): `$n` on
/// PostgreSQL, `?n` on SQLite — what [`sql_for`] rewrites static SQL to.
pub fn placeholder(dialect: Dialect, n: usize) -> String {
    match dialect {
        Dialect::Postgres => format!("${n}"),
        Dialect::Sqlite => format!("?{n}"),
    }
}

/// `($1, $2), ($3, $4)`-style VALUES placeholders for `rows` rows of `cols` columns.
/// SQLite gets anonymous `?` markers (bound in order): numbered ones make SQLite
/// look each name up in a list, which is quadratic in a statement's parameters.
pub fn values_placeholders(dialect: Dialect, rows: usize, cols: usize) -> String {
    let mut out = String::with_capacity(rows * cols * 5);
    for r in 0..rows {
        out.push_str(if r == 0 { "(" } else { ", (" });
        for c in 0..cols {
            if c > 0 {
                out.push_str(", ");
            }
            match dialect {
                Dialect::Postgres => {
                    out.push('$');
                    out.push_str(&(r * cols + c + 1).to_string());
                }
                Dialect::Sqlite => out.push('?'),
            }
        }
        out.push(')');
    }
    out
}

/// `?, ?, …` (SQLite, bound in order) / `$1, $2, …` (PostgreSQL) for an IN list.
pub fn in_list(dialect: Dialect, n: usize) -> String {
    let mut s = values_placeholders(dialect, 1, n);
    s.retain(|c| c != '(' && c != ')');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_spelled_per_dialect() {
        assert_eq!(
            sql_for(Dialect::Sqlite, "a = $1 AND b = $2"),
            "a = ?1 AND b = ?2"
        );
        assert_eq!(sql_for(Dialect::Postgres, "a = $1"), "a = $1");
        assert_eq!(placeholder(Dialect::Postgres, 3), "$3");
        assert_eq!(placeholder(Dialect::Sqlite, 3), "?3");
        assert_eq!(
            values_placeholders(Dialect::Postgres, 2, 2),
            "($1, $2), ($3, $4)"
        );
        assert_eq!(values_placeholders(Dialect::Sqlite, 2, 1), "(?), (?)");
        assert_eq!(in_list(Dialect::Postgres, 3), "$1, $2, $3");
    }
}
