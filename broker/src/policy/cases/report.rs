//! A case run written for machines: JSON (`tessera policy test --json`) and
//! JUnit XML (`--junit FILE`), the format CI systems (GitLab, Jenkins, GitHub
//! test reporters) show per case. The table for people is [`Report::render`].

use super::run::Report;
use serde_json::{json, Value};
use std::fmt::Write;

impl Report {
    /// `{total, passed, failed, files: [{path, cases: [{name, expected, got, passed, differences}]}]}`.
    pub fn to_json(&self) -> Value {
        let files: Vec<Value> = self
            .files
            .iter()
            .map(|f| {
                let cases: Vec<Value> = f
                    .cases
                    .iter()
                    .map(|c| {
                        json!({
                            "name": c.name,
                            "expected": c.expected,
                            "got": c.got,
                            "passed": c.differences.is_empty(),
                            "differences": c.differences,
                        })
                    })
                    .collect();
                json!({ "path": f.path, "cases": cases })
            })
            .collect();
        json!({
            "total": self.total(),
            "passed": self.total() - self.failed(),
            "failed": self.failed(),
            "files": files,
        })
    }

    /// One `<testsuite>` per case file, one `<testcase>` per case, a
    /// `<failure>` saying what differed.
    pub fn junit(&self) -> String {
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = writeln!(
            out,
            "<testsuites name=\"tessera policy test\" tests=\"{}\" failures=\"{}\">",
            self.total(),
            self.failed()
        );
        for f in &self.files {
            let failures = f.cases.iter().filter(|c| !c.differences.is_empty()).count();
            let _ = writeln!(
                out,
                "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\">",
                xml(&f.path),
                f.cases.len()
            );
            for c in &f.cases {
                let _ = write!(
                    out,
                    "    <testcase classname=\"{}\" name=\"{}\"",
                    xml(&f.path),
                    xml(&c.name)
                );
                if c.differences.is_empty() {
                    out.push_str("/>\n");
                } else {
                    let message = format!("expected {}, got {}", c.expected, c.got);
                    let _ = writeln!(
                        out,
                        ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>",
                        xml(&message),
                        xml(&c.differences.join("\n"))
                    );
                }
            }
            out.push_str("  </testsuite>\n");
        }
        out.push_str("</testsuites>\n");
        out
    }
}

/// `text` as XML character data or an attribute value; characters XML 1.0
/// cannot hold at all (most control characters) become U+FFFD.
fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' => out.push_str("&#9;"),
            c if (c as u32) < 0x20 => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::run::{CaseOutcome, FileOutcome};
    use super::*;

    fn report() -> Report {
        Report {
            files: vec![FileOutcome {
                path: "tests/a&b.toml".into(),
                cases: vec![
                    CaseOutcome {
                        name: "alice <reads>".into(),
                        expected: "allow",
                        got: "allow",
                        differences: vec![],
                    },
                    CaseOutcome {
                        name: "bob \"writes\"".into(),
                        expected: "deny",
                        got: "allow",
                        differences: vec![
                            "decision: expected deny, got allow".into(),
                            "x\u{1}".into(),
                        ],
                    },
                ],
            }],
        }
    }

    #[test]
    fn json_counts_and_names_every_case() {
        let v = report().to_json();
        assert_eq!(
            (v["total"].as_u64(), v["failed"].as_u64()),
            (Some(2), Some(1))
        );
        assert_eq!(v["files"][0]["cases"][1]["passed"], false);
        assert_eq!(v["files"][0]["cases"][0]["name"], "alice <reads>");
    }

    #[test]
    fn junit_is_escaped_xml_with_one_failure() {
        let x = report().junit();
        assert!(
            x.contains("<testsuites name=\"tessera policy test\" tests=\"2\" failures=\"1\">"),
            "{x}"
        );
        assert!(
            x.contains("classname=\"tests/a&amp;b.toml\" name=\"alice &lt;reads&gt;\"/>"),
            "{x}"
        );
        assert!(x.contains("name=\"bob &quot;writes&quot;\">"), "{x}");
        assert!(x.contains("<failure message=\"expected deny, got allow\">decision: expected deny, got allow&#10;x\u{fffd}</failure>"), "{x}");
        assert_eq!(x.matches("<testcase").count(), 2);
        assert!(
            !x.chars().any(|c| (c as u32) < 0x20 && c != '\n'),
            "no raw control characters"
        );
    }
}
