//! `mysql_native_password` hashes computed by the broker.
//!
//! Why: `CREATE USER … IDENTIFIED BY '<plaintext>'` puts the password into the
//! statement (general log, binary log, slow log, `SHOW PROCESSLIST`).
//! `IDENTIFIED BY PASSWORD '<hash>'` takes the stored form instead, so the
//! plaintext never leaves the broker. The hash is `*` + upper-case hex of
//! SHA1(SHA1(password)), what MariaDB's `PASSWORD()` returns.

use ring::digest::{digest, SHA1_FOR_LEGACY_USE_ONLY};

pub fn hash(password: &str) -> String {
    let once = digest(&SHA1_FOR_LEGACY_USE_ONLY, password.as_bytes());
    let twice = digest(&SHA1_FOR_LEGACY_USE_ONLY, once.as_ref());
    format!("*{}", crate::ids::hex(twice.as_ref()).to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    #[test]
    fn matches_mariadb_password_function() {
        // MariaDB 10.11: SELECT PASSWORD('pencil')
        assert_eq!(
            super::hash("pencil"),
            "*7614BE58636C810A9D8970A50B3B2A78450413E4"
        );
    }
}
