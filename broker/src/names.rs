//! Grammar of the names a runtime sends when it starts a run: user, task id and
//! kind, task attributes, labels, and the globs that scope a runtime.
//!
//! These strings end up in policy context, JWT claims, audit rows and (later)
//! downstream identifiers, so they are held to a strict charset and length here,
//! once, at the edge.

fn all_bytes(s: &str, max: usize, ok: impl Fn(u8) -> bool) -> bool {
    (1..=max).contains(&s.len()) && s.bytes().all(ok)
}

/// Users: 1-128 of `[A-Za-z0-9._@+-]`.
pub fn is_user(s: &str) -> bool {
    all_bytes(s, 128, |c| {
        c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'@' | b'+' | b'-')
    })
}

/// Task ids: 1-128 of `[A-Za-z0-9._:-]`.
pub fn is_task_id(s: &str) -> bool {
    all_bytes(s, 128, |c| {
        c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-')
    })
}

/// Task kinds and labels: 1-64 of `[a-z0-9._:-]`.
pub fn is_kind_or_label(s: &str) -> bool {
    all_bytes(s, 64, |c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b':' | b'-')
    })
}

/// Task attribute keys: 1-64 of `[A-Za-z0-9._-]`.
pub fn is_attribute_key(s: &str) -> bool {
    all_bytes(s, 64, |c| {
        c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-')
    })
}

/// Task attribute values: at most 256 bytes, no control characters and no
/// character that changes how the text around it reads ([`is_deceptive`]).
pub fn is_attribute_value(s: &str) -> bool {
    s.len() <= 256 && !s.chars().any(|c| c.is_control() || is_deceptive(c))
}

/// Whether `c` is refused in free text a person reads (approval arguments and
/// comments): a control character other than tab and newline, or one
/// [`is_deceptive`] names.
pub fn misleads(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || is_deceptive(c)
}

/// Characters refused in every value that reaches policy context, audit rows
/// and logs, because they make what a reader sees differ from what is there:
/// bidirectional controls (U+061C, U+200E-U+200F, U+202A-U+202E,
/// U+2066-U+2069: `invoice-\u{202E}fdp.exe` reads as `invoice-exe.pdf`), line
/// and paragraph separators (U+2028, U+2029: a forged log line), and invisible
/// characters (zero-width joiners, BOM, variation selectors, tag characters
/// U+E0000-U+E007F: two values that look equal, or text only a model sees). They
/// are refused rather than escaped so that the stored value, the policy's view
/// of it and every rendering of it are the same string.
pub fn is_deceptive(c: char) -> bool {
    matches!(c,
        // Bidirectional controls.
        '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        // Line and paragraph separators.
        | '\u{2028}' | '\u{2029}'
        // Invisible: soft hyphen, Mongolian vowel separator, zero-width and
        // word joiners, invisible operators, deprecated format controls,
        // interlinear annotations, BOM, variation selectors, tag characters
        // (invisible text a model would read).
        | '\u{00AD}' | '\u{180E}' | '\u{200B}'..='\u{200D}' | '\u{2060}'..='\u{2064}'
        | '\u{206A}'..='\u{206F}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}'
        | '\u{1D173}'..='\u{1D17A}' | '\u{E0000}'..='\u{E007F}' | '\u{E0100}'..='\u{E01EF}')
}

/// A comma-separated list of globs (`*` matches any run of characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobList(Vec<String>);

impl GlobList {
    /// Parses `alice,team-*`; each glob is a user/kind-grammar string with `*`.
    pub fn parse(text: &str) -> Option<GlobList> {
        if text.len() > 1024 {
            return None;
        }
        let globs: Vec<String> = text.split(',').map(|g| g.trim().to_owned()).collect();
        let ok = globs.iter().all(|g| {
            all_bytes(g, 128, |c| {
                c.is_ascii_alphanumeric()
                    || matches!(c, b'.' | b'_' | b'@' | b'+' | b'-' | b':' | b'*')
            })
        });
        ok.then_some(GlobList(globs))
    }

    pub fn matches(&self, s: &str) -> bool {
        self.0
            .iter()
            .any(|g| glob_match(g.as_bytes(), s.as_bytes()))
    }

    pub fn as_text(&self) -> String {
        self.0.join(",")
    }
}

/// Iterative wildcard match with backtracking to the last `*` (linear-ish, no recursion).
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn globs() {
        let g = GlobList::parse("alice, team-*").unwrap();
        assert!(g.matches("alice"));
        assert!(g.matches("team-x"));
        assert!(!g.matches("alice2"));
        assert!(!g.matches("bob"));
        assert!(GlobList::parse("*").unwrap().matches("anyone"));
        assert!(GlobList::parse("a;b").is_none());
        assert!(GlobList::parse("").is_none());
        assert!(GlobList::parse("a,,b").is_none());
    }

    #[test]
    fn names_reject_hostile_input() {
        assert!(is_user("alice@example.com"));
        assert!(!is_user("alice'--"));
        assert!(!is_user(&"a".repeat(129)));
        assert!(!is_kind_or_label("Summarize"));
        assert!(is_kind_or_label("untrusted-input"));
        assert!(!is_attribute_value("a\u{7}b"));
        assert!(!is_attribute_value("invoice-\u{202E}fdp.exe"));
        assert!(!is_attribute_value("line\u{2028}break"));
        assert!(!is_attribute_value("tag\u{E0041}\u{E0042}"));
        assert!(!is_attribute_value("soft\u{00AD}hyphen"));
        assert!(is_attribute_value("Résumé – 東京 / مرحبا"));
    }

    proptest! {
        #[test]
        fn star_matches_everything_and_literal_matches_itself(s in "[a-z0-9.@-]{1,40}") {
            prop_assert!(glob_match(b"*", s.as_bytes()));
            prop_assert!(glob_match(s.as_bytes(), s.as_bytes()));
            let prefixed = format!("{}*", &s[..1]);
            prop_assert!(glob_match(prefixed.as_bytes(), s.as_bytes()));
        }

        #[test]
        fn glob_never_panics(p in ".{0,20}", t in ".{0,40}") {
            let _ = glob_match(p.as_bytes(), t.as_bytes());
        }
    }
}
