//! Tests of load-time diagnostics: every problem is reported as file:line:col with a
//! message, and nothing of a bad policy directory is loaded.

use super::tests::{at, load_err, shipped_schema, READ_ALL};
use super::PolicyEngine;

#[test]
fn duplicate_ids_name_both_files() {
    let p = r#"@id("same") permit (principal, action, resource);"#;
    let d = load_err(&[("one.cedar", p), ("two.cedar", p)]);
    assert_eq!(d.len(), 1);
    let msg = d.first().map(|d| d.to_string()).unwrap_or_default();
    assert!(
        msg.starts_with("two.cedar:1:1: error:") && msg.contains("one.cedar"),
        "{msg}"
    );
}

#[test]
fn annotation_errors_point_at_the_annotation() {
    let text = "permit (principal, action, resource);\n\n@id(\"x\")\n  @ttl(\"forever\")\npermit (principal, action, resource);\n\n@color(\"red\") permit (principal, action, resource);\n// ok\nforbid (principal, action, resource);\n@uses(\"3\") forbid (principal, action, resource);\n";
    let d = load_err(&[("p/a.cedar", text)]);
    let got: Vec<_> = d.iter().map(at).collect();
    assert_eq!(
        got,
        [
            ("p/a.cedar", 4, 3),
            ("p/a.cedar", 7, 1),
            ("p/a.cedar", 10, 1)
        ],
        "{d:?}"
    );
    assert!(d.iter().all(|d| !d.message.is_empty()));
    assert!(d.first().is_some_and(|d| d.message.contains("@ttl")));
}

#[test]
fn schema_invalid_policy_reports_file_line_col() {
    let text = "@id(\"ok\") permit (principal, action, resource);\n\npermit (principal, action, resource)\nwhen { resource.nosuchattr == \"x\" };\n";
    let d = load_err(&[("a.cedar", READ_ALL), ("b.cedar", text)]);
    assert_eq!(d.len(), 1, "{d:?}");
    let first = d
        .first()
        .map(|d| (d.file.clone(), d.line, d.column, d.to_string()));
    let (file, line, col, shown) = first.unwrap_or_default();
    assert_eq!((file.as_str(), line, col), ("b.cedar", 4, 8), "{shown}");
    assert!(shown.contains("nosuchattr"), "{shown}");
}

#[test]
fn parse_errors_and_templates_are_located() {
    let d = load_err(&[(
        "a.cedar",
        "permit (principal, action, resource)\nwhen { 1 + };",
    )]);
    assert_eq!(
        d.first().map(|d| (d.line, d.column > 0)),
        Some((2, true)),
        "{d:?}"
    );
    let d = load_err(&[(
        "t.cedar",
        "\n permit (principal == ?principal, action, resource);",
    )]);
    assert_eq!(d.iter().map(at).collect::<Vec<_>>(), [("t.cedar", 2, 2)]);
    let d = load_err(&[(
        "u.cedar",
        r#"permit (principal, action == Tessera::Action::"nope", resource);"#,
    )]);
    assert_eq!(d.len(), 1);
    assert!(
        d.first()
            .is_some_and(|d| d.line == 1 && d.to_string().contains("nope")),
        "{d:?}"
    );
}

#[test]
fn bad_schema_and_entities_are_reported() {
    let err = PolicyEngine::from_sources("namespace {", &[], "[]").err();
    let d = err.map(|e| e.diagnostics).unwrap_or_default();
    assert!(
        d.first()
            .is_some_and(|d| d.file == "schema.cedarschema" && d.line == 1),
        "{d:?}"
    );
    let bad_entities =
        r#"[{"uid": {"type": "Tessera::Nope", "id": "x"}, "attrs": {}, "parents": []}]"#;
    let err = PolicyEngine::from_sources(&shipped_schema(), &[], bad_entities).err();
    assert!(err.is_some_and(|e| e.to_string().starts_with("entities.json:")));
}
