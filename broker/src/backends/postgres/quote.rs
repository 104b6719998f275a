//! The one place PostgreSQL identifiers and literals are quoted.
//!
//! Every name and value the PostgreSQL backend puts into a statement passes
//! through [`ident`] or [`literal`]; nothing is spliced in any other way. The
//! inputs already come from strict grammars (`backends::database`), so these
//! functions are the second wall, not the first: they still quote correctly
//! whatever they are given, and refuse the one byte PostgreSQL cannot carry (NUL).

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("value cannot be quoted for PostgreSQL (NUL byte)")]
pub struct Unquotable;

/// `"name"`, with `"` doubled.
pub fn ident(name: &str) -> Result<String, Unquotable> {
    if name.is_empty() || name.contains('\0') {
        return Err(Unquotable);
    }
    Ok(format!("\"{}\"", name.replace('"', "\"\"")))
}

/// `'value'`, with `'` doubled; a value holding a backslash is written as an
/// escape string (`E'…'`, backslashes doubled) so the result means the same
/// whatever `standard_conforming_strings` is set to.
pub fn literal(value: &str) -> Result<String, Unquotable> {
    if value.contains('\0') {
        return Err(Unquotable);
    }
    let quoted = value.replace('\'', "''");
    if quoted.contains('\\') {
        Ok(format!("E'{}'", quoted.replace('\\', "\\\\")))
    } else {
        Ok(format!("'{quoted}'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_identifiers() {
        assert_eq!(ident("orders").unwrap(), "\"orders\"");
        assert_eq!(ident("Or\"ders").unwrap(), "\"Or\"\"ders\"");
        assert_eq!(ident("a; DROP ROLE x").unwrap(), "\"a; DROP ROLE x\"");
        assert_eq!(ident(""), Err(Unquotable));
        assert_eq!(ident("a\0b"), Err(Unquotable));
    }

    #[test]
    fn quotes_literals() {
        assert_eq!(literal("abc").unwrap(), "'abc'");
        assert_eq!(literal("it's").unwrap(), "'it''s'");
        assert_eq!(literal("a\\'b").unwrap(), "E'a\\\\''b'");
        assert_eq!(literal("x\0"), Err(Unquotable));
    }
}
