//! What `tessera exec --token/--aws/--db` ask for, and the names the
//! credentials get in the command's environment.
//!
//! Each flag repeats. A value is `ACTION=RESOURCE`, or `NAME@ACTION=RESOURCE`
//! to put that credential's variables under `NAME_` (`--db
//! reports@insert=pg-main:analytics.public.reports` sets `REPORTS_PGUSER`, …,
//! `REPORTS_DATABASE_URL`). At most one value per flag goes without a name (it
//! gets the standard names the tools read: `PGUSER`, `AWS_ACCESS_KEY_ID`, …),
//! and names are unique: no credential ever overwrites another's variables.
//! All of it is checked before anything is obtained.

use std::collections::BTreeSet;

/// One requested credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantSpec {
    /// `--db`, `--aws` or `--token`.
    pub flag: &'static str,
    /// `REPORTS_` for `reports@…`; empty for the standard names.
    pub prefix: String,
    pub action: String,
    pub resource: String,
}

impl GrantSpec {
    /// `name` as this credential's variable (`PGUSER` or `REPORTS_PGUSER`).
    pub fn var(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }
}

/// Parses one `[NAME@]ACTION=RESOURCE` value of `flag`.
pub fn parse(flag: &'static str, value: &str) -> Result<GrantSpec, String> {
    let expected = || format!("{flag}: expected [NAME@]ACTION=RESOURCE, got {value:?}");
    let (head, resource) = value.split_once('=').ok_or_else(expected)?;
    let (prefix, action) = match head.split_once('@') {
        Some((name, action)) => {
            let ok = !name.is_empty()
                && name.len() <= 32
                && name.as_bytes()[0].is_ascii_alphabetic()
                && name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
            if !ok {
                return Err(format!(
                    "{flag}: {name:?} is not a NAME (1-32 letters, digits, _; a letter first)"
                ));
            }
            (format!("{}_", name.to_ascii_uppercase()), action)
        }
        None => (String::new(), head),
    };
    if action.is_empty() || resource.is_empty() {
        return Err(expected());
    }
    Ok(GrantSpec {
        flag,
        prefix,
        action: action.to_owned(),
        resource: resource.to_owned(),
    })
}

/// Every value of the three flags, checked together (module docs).
pub fn parse_all(
    token: &[String],
    aws: &[String],
    db: &[String],
) -> Result<Vec<GrantSpec>, String> {
    let mut specs = Vec::new();
    for (flag, values) in [("--token", token), ("--aws", aws), ("--db", db)] {
        let mut unnamed = 0;
        for v in values {
            let spec = parse(flag, v)?;
            if spec.prefix.is_empty() {
                unnamed += 1;
                if unnamed > 1 {
                    return Err(format!(
                        "{flag} is given twice without a NAME@: both would set the same \
                         variables; name the others (e.g. {flag} reports@{v})"
                    ));
                }
            }
            specs.push(spec);
        }
    }
    let mut seen = BTreeSet::new();
    for s in specs.iter().filter(|s| !s.prefix.is_empty()) {
        if !seen.insert(s.prefix.clone()) {
            return Err(format!(
                "{}: the NAME {} is used twice",
                s.flag,
                s.prefix.trim_end_matches('_').to_ascii_lowercase()
            ));
        }
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_value_is_an_optional_name_an_action_and_a_resource() {
        let s = parse("--db", "reports@insert=pg-main:analytics.public.reports").unwrap();
        assert_eq!(s.prefix, "REPORTS_");
        assert_eq!(s.action, "insert");
        assert_eq!(s.resource, "pg-main:analytics.public.reports");
        assert_eq!(s.var("PGUSER"), "REPORTS_PGUSER");
        let s = parse("--token", "read=svc-reports:a@b/c=d").unwrap();
        assert_eq!((s.prefix.as_str(), s.action.as_str()), ("", "read"));
        assert_eq!(
            s.resource, "svc-reports:a@b/c=d",
            "only the part before = is split"
        );
        for bad in [
            "read",
            "=r",
            "read=",
            "@read=r",
            "9x@read=r",
            "a-b@read=r",
            "x@=r",
        ] {
            assert!(parse("--db", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn no_two_credentials_share_a_variable() {
        parse_all(
            &strings(&["read=svc:a"]),
            &strings(&["get=aws:x", "logs@put=aws:y"]),
            &strings(&["select=pg:a.b.c", "w@insert=pg:a.b.d"]),
        )
        .unwrap();
        let e = parse_all(&[], &[], &strings(&["select=pg:a.b.c", "insert=pg:a.b.d"])).unwrap_err();
        assert!(e.contains("twice without a NAME@"), "{e}");
        let e = parse_all(
            &strings(&["x@read=svc:a"]),
            &[],
            &strings(&["X@select=pg:a.b.c"]),
        )
        .unwrap_err();
        assert!(e.contains("used twice"), "{e}");
    }
}
