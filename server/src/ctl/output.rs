//! How `warren ctl` prints: aligned tables (a header row, then one row per item; the rows
//! alone with `--silent`) or, with `--format json`, the items as JSON objects of the columns
//! asked for.

use serde_json::{Map, Value};

/// `--format` (or rabbitmqctl's `--formatter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns (rabbitmqctl's `pretty_table` is taken as this).
    #[value(alias = "pretty_table")]
    Table,
    /// JSON.
    Json,
    /// Aligned columns without the header row: `--silent`, as rabbitmqctl's.
    #[value(skip)]
    Rows,
}

impl Format {
    /// The format `--silent` turns this one into: a table loses its header row.
    pub fn silenced(self) -> Format {
        match self {
            Format::Table => Format::Rows,
            other => other,
        }
    }
}

/// Writes `text` to stdout; a closed pipe (`warren ctl ... | head`) is not an error.
pub fn say(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().write_all(text.as_bytes());
}

/// A JSON value as a table cell: strings bare, the rest as JSON.
fn cell(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Prints `items`, each as the `columns` `pick` reads from it.
pub fn print(format: Format, columns: &[String], items: &[Value], pick: impl Fn(&Value, &str) -> Value) {
    let rows: Vec<Vec<Value>> = items.iter().map(|item| columns.iter().map(|c| pick(item, c)).collect()).collect();
    match format {
        Format::Json => {
            let objects: Vec<Value> = rows
                .into_iter()
                .map(|row| Value::Object(columns.iter().cloned().zip(row).collect::<Map<String, Value>>()))
                .collect();
            say(&format!("{}\n", serde_json::to_string_pretty(&objects).unwrap_or_default()));
        }
        Format::Table | Format::Rows => {
            let text: Vec<Vec<String>> = rows.iter().map(|row| row.iter().map(cell).collect()).collect();
            let widths: Vec<usize> = columns
                .iter()
                .enumerate()
                .map(|(i, c)| text.iter().map(|row| row[i].chars().count()).chain([c.len()]).max().unwrap_or(0))
                .collect();
            let line = |cells: Vec<&str>| -> String {
                let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
                format!("{}\n", padded.join("  ").trim_end())
            };
            let mut out =
                if format == Format::Rows { String::new() } else { line(columns.iter().map(String::as_str).collect()) };
            for row in &text {
                out.push_str(&line(row.iter().map(String::as_str).collect()));
            }
            say(&out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_bare_strings_or_json() {
        assert_eq!(cell(&Value::String("q".into())), "q");
        assert_eq!(cell(&serde_json::json!({"a": 1})), r#"{"a":1}"#);
        assert_eq!(cell(&Value::Null), "");
    }
}
