//! The table an admin command prints for people: the rows of one list in the
//! broker's answer, one column per field, `-` for a field it left empty (or
//! the answer as JSON with `--json`).
//!
//! Why its own file: the runtimes, runs, leases, keys, approvers and approvals
//! families all print lists this way; each uses this leaf rather than another
//! family's file.

use super::remote::{print_json, Remote};
use serde_json::Value;

/// The rows of `v[key]` as a table (or `v` as JSON with `--json`).
pub fn print_table(remote: &Remote, v: &impl serde::Serialize, key: &str, columns: &[&str]) {
    if remote.json {
        print_json(v);
        return;
    }
    let v = serde_json::to_value(v).unwrap_or_default();
    let rows = v[key].as_array().cloned().unwrap_or_default();
    let cell = |row: &Value, c: &str| match &row[c] {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    };
    let widths: Vec<usize> = columns
        .iter()
        .map(|c| {
            rows.iter()
                .map(|r| cell(r, c).len())
                .max()
                .unwrap_or(0)
                .max(c.len())
        })
        .collect();
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
    };
    println!(
        "{}",
        line(columns.iter().map(|c| c.to_uppercase()).collect())
    );
    for r in &rows {
        println!("{}", line(columns.iter().map(|c| cell(r, c)).collect()));
    }
}
