//! Small, strict grammars shared by policy annotations and configuration:
//! durations (`"1h30m"`), rates (`"60/min"`) and approval gates
//! (`"2 of group:release"`).
//!
//! Why: constraints in Cedar annotations (`@ttl`, `@rate`) and server-wide caps in
//! `tessera.toml` must mean exactly the same thing, so they share one parser.
//!
//! Invariants:
//! - parsers never panic and never overflow, whatever the input;
//! - every accepted value formats back to a string that parses to the same value;
//! - a [`GrammarError`] names what was wrong and never echoes more than 64 characters
//!   of the input (inputs may come from untrusted requests and end up in logs).

pub mod approval_gate;
pub mod duration;
pub mod rate;

pub use duration::{format_duration, parse_duration};
pub use rate::Rate;

/// A value did not match its grammar. The message is meant for humans (policy
/// authors, operators) and quotes at most 64 characters of the offending input.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("{0}")]
pub struct GrammarError(pub String);

/// Most characters of an input that an error message may quote.
const MAX_ECHO_CHARS: usize = 64;

/// Quotes `input` for an error message, truncated to [`MAX_ECHO_CHARS`] characters
/// and with control characters escaped so a log line stays one line.
pub(crate) fn quote(input: &str) -> String {
    let mut out: String = input
        .chars()
        .take(MAX_ECHO_CHARS)
        .flat_map(char::escape_debug)
        .collect();
    if input.chars().nth(MAX_ECHO_CHARS).is_some() {
        out.push('…');
    }
    format!("\"{out}\"")
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn quote_truncates_long_input() {
        let long = "x".repeat(500);
        let q = quote(&long);
        assert_eq!(q.chars().filter(|c| *c == 'x').count(), 64);
        assert!(q.ends_with("…\""));
    }

    #[test]
    fn quote_escapes_control_characters() {
        assert_eq!(quote("a\nb"), "\"a\\nb\"");
    }
}
