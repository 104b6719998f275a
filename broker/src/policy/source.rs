//! Locating things in policy source text, for file:line:col diagnostics.
//!
//! Why: Cedar's public API exposes byte offsets only through miette labels on errors,
//! not for parsed policies or their annotations. Annotation errors must still point at
//! the offending `@key`, so this module finds policies and annotations in the text.
//!
//! Invariants: offsets are byte offsets into one file's text; lines and columns are
//! 1-based and columns count characters; nothing here panics on any input (offsets past
//! the end or inside a character are clamped).

use miette::Diagnostic;

/// Where one loaded policy is written: its file, its start, and each annotation's `@`.
/// Kept in the engine so that checks made after loading (lint) point at the source.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Site {
    pub file: String,
    /// 1-based (line, column) of the policy; (0, 0) when it could not be located.
    pub at: (usize, usize),
    /// (key, line, column) of each annotation.
    pub annotations: Vec<(String, usize, usize)>,
}

impl Site {
    /// The site of a policy starting at byte `offset` of `file_text`, whose own text is
    /// `policy_text` (annotation offsets are relative to it).
    pub(super) fn new(
        file: &str,
        file_text: &str,
        offset: Option<usize>,
        policy_text: &str,
    ) -> Site {
        let Some(start) = offset else {
            return Site {
                file: file.to_string(),
                ..Site::default()
            };
        };
        let annotations = annotation_offsets(policy_text)
            .into_iter()
            .map(|(key, rel)| {
                let (line, column) = line_col(file_text, start + rel);
                (key, line, column)
            })
            .collect();
        Site {
            file: file.to_string(),
            at: line_col(file_text, start),
            annotations,
        }
    }

    /// (line, column) of annotation `@key`, else of the policy.
    pub(super) fn of(&self, key: &str) -> (usize, usize) {
        self.annotations
            .iter()
            .find(|(k, _, _)| k == key)
            .map_or(self.at, |(_, line, column)| (*line, *column))
    }
}

/// 1-based (line, column) of byte `offset` in `text`; column counts characters.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = text.get(..end).unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, column)
}

/// Byte offset of the primary (else first) label of a Cedar diagnostic.
pub(super) fn label_offset(diag: &dyn Diagnostic) -> Option<usize> {
    let labels: Vec<_> = diag.labels()?.collect();
    labels
        .iter()
        .find(|l| l.primary())
        .or_else(|| labels.first())
        .map(|l| l.offset())
}

/// Offsets in `file` of each of `texts`, which occur in `file` in this order (Cedar's
/// verbatim text of each policy, in source order). `None` when one is not found.
pub(super) fn locate_in_order<'a>(
    file: &str,
    texts: impl Iterator<Item = &'a str>,
) -> Vec<Option<usize>> {
    let mut cursor = 0usize;
    texts
        .map(|t| {
            let found = file.get(cursor..)?.find(t)? + cursor;
            cursor = found + t.len();
            Some(found)
        })
        .collect()
}

/// Offsets of each `@key` annotation in one policy's text, skipping strings and
/// comments. Returns (key, offset of the '@').
pub(super) fn annotation_offsets(text: &str) -> Vec<(String, usize)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0usize;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'"' => {
                i += 1;
                while let Some(&c) = bytes.get(i) {
                    i += if c == b'\\' { 2 } else { 1 };
                    if c == b'"' {
                        break;
                    }
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while bytes.get(i).is_some_and(|&c| c != b'\n') {
                    i += 1;
                }
            }
            b'@' => {
                let start = i;
                i += 1;
                let key_start = i;
                while bytes
                    .get(i)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
                {
                    i += 1;
                }
                if let Some(key) = text.get(key_start..i) {
                    out.push((key.to_string(), start));
                }
            }
            _ => i += 1,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_is_one_based_and_counts_chars() {
        let text = "ab\ncdé\nf";
        assert_eq!(line_col(text, 0), (1, 1));
        assert_eq!(line_col(text, 3), (2, 1));
        assert_eq!(line_col(text, 7), (2, 4)); // after 'é' (2 bytes)
        assert_eq!(line_col(text, 6), (2, 3)); // inside 'é': clamped back
        assert_eq!(line_col(text, 999), (3, 2));
    }

    #[test]
    fn finds_annotations_outside_strings_and_comments() {
        let text =
            "// @nope(\"x\")\n@id(\"a@b\") @ttl(\"5m\")\npermit(principal, action, resource);";
        let found = annotation_offsets(text);
        let keys: Vec<_> = found.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["id", "ttl"]);
        assert_eq!(found.first().map(|(_, o)| *o), Some(14));
    }

    #[test]
    fn site_locates_the_policy_and_its_annotations() {
        let file = "// x\n\n@id(\"a\")\n  @ttl(\"5m\") permit (principal, action, resource);";
        let policy = file.get(6..).unwrap_or_default();
        let site = Site::new("f.cedar", file, Some(6), policy);
        assert_eq!(site.at, (3, 1));
        assert_eq!(site.of("ttl"), (4, 3));
        assert_eq!(site.of("uses"), (3, 1), "absent: the policy itself");
        assert_eq!(Site::new("f.cedar", file, None, policy).of("ttl"), (0, 0));
    }

    #[test]
    fn locates_repeated_texts_in_order() {
        let file = "x; x; y;";
        assert_eq!(
            locate_in_order(file, ["x;", "x;", "y;"].into_iter()),
            [Some(0), Some(3), Some(6)]
        );
        assert_eq!(locate_in_order(file, ["z"].into_iter()), [None]);
    }
}
