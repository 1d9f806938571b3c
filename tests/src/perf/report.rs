//! Report mode: JSON summaries, one per line, each labelled with a scenario and a broker,
//! become one markdown table per scenario with the median of every metric per broker and the
//! ratio of the first broker to the second (Warren/RabbitMQ in `bench/compare.sh`).
//!
//! A line may also be `{"scenario": .., "broker": .., "error": ".."}` for a run that failed
//! before it could summarize; such runs are counted, not averaged.

use super::summary::group;
use anyhow::Context;
use serde_json::Value;
use std::path::Path;

/// The metrics shown, in this order, with their column titles; absent ones are skipped.
const METRICS: &[(&str, &str)] = &[
    ("publish_rate", "publish rate (msg/s)"),
    ("consume_rate", "consume rate (msg/s)"),
    ("latency_p50_ms", "latency p50 (ms)"),
    ("latency_p95_ms", "latency p95 (ms)"),
    ("latency_p99_ms", "latency p99 (ms)"),
    ("latency_max_ms", "latency max (ms)"),
    ("connect_secs", "time to open all connections (s)"),
    ("rss_before_kib", "broker RSS before (KiB)"),
    ("rss_after_kib", "broker RSS with connections (KiB)"),
    ("rss_per_connection_kib", "broker RSS per connection (KiB)"),
];

/// One labelled run.
struct Run {
    scenario: String,
    broker: String,
    fields: serde_json::Map<String, Value>,
}

/// Reads `path` and prints the markdown tables to stdout.
pub fn print(path: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let runs = parse(&text)?;
    print!("{}", render(&runs));
    Ok(())
}

fn parse(text: &str) -> anyhow::Result<Vec<Run>> {
    let mut runs = Vec::new();
    for (number, line) in text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty()) {
        let value: Value = serde_json::from_str(line).with_context(|| format!("line {}: not JSON", number + 1))?;
        let Value::Object(fields) = value else { anyhow::bail!("line {}: not a JSON object", number + 1) };
        let label = |key: &str| fields.get(key).and_then(Value::as_str).unwrap_or("?").to_string();
        runs.push(Run { scenario: label("scenario"), broker: label("broker"), fields });
    }
    Ok(runs)
}

fn render(runs: &[Run]) -> String {
    let brokers = distinct(runs.iter().map(|run| run.broker.as_str()));
    let mut out = String::new();
    for scenario in distinct(runs.iter().map(|run| run.scenario.as_str())) {
        let of = |broker: &str| -> Vec<&Run> {
            runs.iter().filter(|run| run.scenario == scenario && run.broker == broker).collect()
        };
        out.push_str(&format!("\n### {scenario}\n\n| metric |"));
        for broker in &brokers {
            out.push_str(&format!(" {broker} |"));
        }
        let with_ratio = brokers.len() == 2;
        if with_ratio {
            out.push_str(&format!(" {}/{} |", brokers[0], brokers[1]));
        }
        out.push_str(&format!("\n|---|{}{}\n", "---:|".repeat(brokers.len()), if with_ratio { "---:|" } else { "" }));
        for (key, title) in METRICS {
            let medians: Vec<Option<f64>> = brokers.iter().map(|broker| median(&of(broker), key)).collect();
            if medians.iter().all(Option::is_none) {
                continue;
            }
            out.push_str(&format!("| {title} |"));
            for value in &medians {
                out.push_str(&format!(" {} |", value.map(format_value).unwrap_or_else(|| "-".into())));
            }
            if with_ratio {
                let ratio = match (medians[0], medians[1]) {
                    (Some(a), Some(b)) if b != 0.0 => format!("{:.2}", a / b),
                    _ => "-".into(),
                };
                out.push_str(&format!(" {ratio} |"));
            }
            out.push('\n');
        }
        out.push_str("| runs (failed, lost messages) |");
        for broker in &brokers {
            let runs = of(broker);
            let failed = runs.iter().filter(|run| run.fields.contains_key("error")).count();
            let lost: u64 = runs.iter().filter_map(|run| run.fields.get("lost").and_then(Value::as_u64)).sum();
            out.push_str(&format!(" {} ({failed}, {}) |", runs.len(), group(lost)));
        }
        out.push_str(if with_ratio { " |\n" } else { "\n" });
    }
    out
}

/// The median of `key` over the runs that have it.
fn median(runs: &[&Run], key: &str) -> Option<f64> {
    let mut values: Vec<f64> = runs.iter().filter_map(|run| run.fields.get(key).and_then(Value::as_f64)).collect();
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    Some(if values.len() % 2 == 1 { values[middle] } else { (values[middle - 1] + values[middle]) / 2.0 })
}

fn format_value(value: f64) -> String {
    if value.abs() >= 100.0 {
        group(value.round() as u64)
    } else {
        format!("{value:.2}")
    }
}

fn distinct<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen: Vec<&str> = Vec::new();
    for item in items {
        if !seen.contains(&item) {
            seen.push(item);
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_ratio() {
        let text = r#"
{"scenario":"s","broker":"a","publish_rate":100.0,"lost":0}
{"scenario":"s","broker":"b","publish_rate":50.0,"lost":0}
{"scenario":"s","broker":"a","publish_rate":300.0,"lost":2}
{"scenario":"s","broker":"b","error":"exit status 2"}
{"scenario":"s","broker":"a","publish_rate":200.0,"lost":0}
"#;
        let table = render(&parse(text).unwrap());
        assert!(table.contains("| publish rate (msg/s) | 200 | 50.00 | 4.00 |"), "{table}");
        assert!(table.contains("| runs (failed, lost messages) | 3 (0, 2) | 2 (1, 0) | |"), "{table}");
    }
}
