//! The Prometheus text exposition format (0.0.4): a family's `HELP` and `TYPE` lines, its
//! samples' lines, label values escaped as the format requires.

use std::fmt::Write;
use warren_delivery::latency::{HistogramSnapshot, BUCKET_BOUNDS_SECONDS};

/// The exposition format's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric family's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
    Histogram,
}

/// A family's `HELP` and `TYPE` lines.
pub fn family_text(name: &str, kind: Kind, help: &str) -> String {
    let kind = match kind {
        Kind::Gauge => "gauge",
        Kind::Counter => "counter",
        Kind::Histogram => "histogram",
    };
    format!("# HELP {name} {help}\n# TYPE {name} {kind}\n")
}

/// One sample's line.
pub fn sample_text(name: &str, labels: &[(&str, &str)], value: f64) -> String {
    let mut text = String::with_capacity(name.len() + 32);
    push_sample(&mut text, name, labels, value);
    text
}

/// Appends one sample's line to `text`.
pub fn push_sample(text: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    text.push_str(name);
    if !labels.is_empty() {
        text.push('{');
        for (i, (key, label)) in labels.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            let _ = write!(text, "{key}=\"{}\"", escape(label));
        }
        text.push('}');
    }
    let _ = writeln!(text, " {value}");
}

/// A histogram's lines (after its `HELP` and `TYPE`).
pub fn histogram_text(name: &str, snapshot: &HistogramSnapshot) -> String {
    let mut text = String::new();
    for (bound, count) in BUCKET_BOUNDS_SECONDS.iter().zip(&snapshot.cumulative) {
        let _ = writeln!(text, "{name}_bucket{{le=\"{bound}\"}} {count}");
    }
    let _ = writeln!(text, "{name}_bucket{{le=\"+Inf\"}} {}", snapshot.count);
    let _ = writeln!(text, "{name}_sum {}", snapshot.sum_seconds);
    let _ = writeln!(text, "{name}_count {}", snapshot.count);
    text
}

/// A label value with backslash, quote and newline escaped, as the format requires.
fn escape(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return value.into();
    }
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n").into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let text = sample_text("x", &[("queue", "a\"b\\c\nd")], 1.0);
        assert_eq!(text, "x{queue=\"a\\\"b\\\\c\\nd\"} 1\n");
    }
}
