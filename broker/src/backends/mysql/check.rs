//! MariaDB settings that let a throw-away account do more than its one grant,
//! found by asking the server, each with the statement an operator runs.
//!
//! - `public_grants` (MariaDB 10.11+): privileges granted `TO PUBLIC` apply to
//!   every account, throw-away ones included.
//! - `xa_prepared`: since MariaDB 10.5 a prepared XA transaction survives its
//!   session and its account, holding its row locks; a throw-away user can
//!   leave one behind (any account may run `XA PREPARE`, no privilege needed).
//!   The server does not record whose it is, so the broker cannot roll back
//!   only its users' ones: it reports every prepared XA transaction it sees
//!   (`XA RECOVER`), and strict mode does not refuse over it — another
//!   application's transaction may be prepared for a moment between its two
//!   phases — but `tessera backends check` and the start-up warning name it.
//!
//! Both read-only; both work with the least-privileged account
//! (docs/backends/databases.md).

use crate::backends::Finding;
use sqlx::{MySqlPool, Row};

/// ER_NONEXISTING_GRANT and ER_PARSE_ERROR: a server without `PUBLIC`.
const NO_PUBLIC: [u16; 2] = [1141, 1064];

pub async fn unsafe_defaults(pool: &MySqlPool) -> Result<Vec<Finding>, sqlx::Error> {
    let mut out = vec![];
    let grants: Vec<String> = match sqlx::raw_sql("SHOW GRANTS FOR PUBLIC")
        .fetch_all(pool)
        .await
    {
        Ok(rows) => rows
            .iter()
            .filter_map(|r| r.try_get::<String, _>(0).ok())
            .filter(|g| !g.starts_with("GRANT USAGE ON *.*"))
            .collect(),
        Err(e) if super::has_number(&e, &NO_PUBLIC) => vec![],
        Err(e) => return Err(e),
    };
    if !grants.is_empty() {
        let fixes: Vec<String> = grants.iter().map(|g| revoke_of(g)).collect();
        out.push(Finding {
            id: "public_grants",
            what: format!(
                "granted to every account, throw-away ones included: {}",
                grants.join("; ")
            ),
            fix: fixes.join(" "),
            strict: true,
        });
    }
    let xids: Vec<String> = sqlx::raw_sql("XA RECOVER FORMAT='SQL'")
        .fetch_all(pool)
        .await?
        .iter()
        .filter_map(|r| r.try_get::<String, _>("data").ok())
        .collect();
    if !xids.is_empty() {
        out.push(Finding {
            id: "xa_prepared",
            what: format!(
                "{} prepared XA transaction(s) hold their locks with no session; one left by a \
                 throw-away user outlives it (MariaDB keeps no owner)",
                xids.len()
            ),
            fix: xids
                .iter()
                .map(|x| format!("XA ROLLBACK {x};"))
                .collect::<Vec<_>>()
                .join(" "),
            strict: false,
        });
    }
    Ok(out)
}

/// `GRANT p ON o TO PUBLIC` → `REVOKE p ON o FROM PUBLIC;`.
fn revoke_of(grant: &str) -> String {
    let body = grant.strip_prefix("GRANT ").unwrap_or(grant);
    let body = body
        .rsplit_once(" TO PUBLIC")
        .map_or(body, |(head, _)| head)
        .replace(" WITH GRANT OPTION", "");
    format!("REVOKE {body} FROM PUBLIC;")
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_public_grant_becomes_its_revoke() {
        assert_eq!(
            super::revoke_of("GRANT SELECT, INSERT ON `shop`.* TO PUBLIC"),
            "REVOKE SELECT, INSERT ON `shop`.* FROM PUBLIC;"
        );
        assert_eq!(
            super::revoke_of("GRANT SELECT ON `a`.`b` TO PUBLIC WITH GRANT OPTION"),
            "REVOKE SELECT ON `a`.`b` FROM PUBLIC;"
        );
    }
}
