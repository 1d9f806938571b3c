//! The list endpoints' query parameters, as RabbitMQ's management API reads them: `name`
//! (a substring, or a regular expression with `use_regex=true`), `sort` (a field, dotted for
//! nested ones: `message_stats.publish_details.rate`), `sort_reverse`, `page` and
//! `page_size` (answered with RabbitMQ's paged shape), and `columns` (only these fields,
//! dotted too).

use crate::error::ApiError;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::cmp::Ordering;

/// The largest page RabbitMQ serves, and so Warren.
pub const MAX_PAGE_SIZE: usize = 500;
/// The page size when `page` is given alone.
const DEFAULT_PAGE_SIZE: usize = 100;
/// Longest `name` filter accepted (a regular expression is compiled from it).
const MAX_FILTER_BYTES: usize = 1024;

/// What a list request asked for.
#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    name: Option<String>,
    use_regex: Option<String>,
    sort: Option<String>,
    sort_reverse: Option<String>,
    page: Option<usize>,
    page_size: Option<usize>,
    columns: Option<String>,
}

fn truthy(flag: &Option<String>) -> bool {
    flag.as_deref().is_some_and(|v| v == "true" || v == "1")
}

/// The field at `path` (dots between names) of `item`.
fn field<'a>(item: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(item, |value, key| value.get(key))
}

/// Orders two field values: missing first, then numbers, then text (case-insensitively), as
/// a table's column would sort.
fn compare(a: Option<&Value>, b: Option<&Value>) -> Ordering {
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => {
            x.as_f64().unwrap_or_default().total_cmp(&y.as_f64().unwrap_or_default())
        }
        (Some(Value::String(x)), Some(Value::String(y))) => x.to_lowercase().cmp(&y.to_lowercase()),
        (Some(Value::Bool(x)), Some(Value::Bool(y))) => x.cmp(y),
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some(x), Some(y)) => x.to_string().cmp(&y.to_string()),
    }
}

/// Keeps only `columns` (dotted paths) of `item`, nested as they were.
fn only_columns(item: &Value, columns: &[&str]) -> Value {
    let mut kept = Map::new();
    for column in columns {
        if let Some(value) = field(item, column) {
            put(&mut kept, column, value.clone());
        }
    }
    Value::Object(kept)
}

/// Puts `value` at dotted `path` in `map`, making the objects on the way.
fn put(map: &mut Map<String, Value>, path: &str, value: Value) {
    match path.split_once('.') {
        None => {
            map.insert(path.to_string(), value);
        }
        Some((first, rest)) => {
            let entry = map.entry(first.to_string()).or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(inner) = entry {
                put(inner, rest, value);
            }
        }
    }
}

impl ListQuery {
    /// Filters, sorts, pages and trims `items`, answering as RabbitMQ does: a plain array
    /// without `page`, the paged object with it. A bad regular expression or page is 400.
    pub fn apply(&self, mut items: Vec<Value>) -> Result<Value, ApiError> {
        let bad_request = |text: String| ApiError::new(StatusCode::BAD_REQUEST, text);
        let total = items.len();
        if let Some(name) = self.name.as_deref().filter(|n| !n.is_empty()) {
            if name.len() > MAX_FILTER_BYTES {
                return Err(bad_request(format!("the name filter is longer than {MAX_FILTER_BYTES} bytes")));
            }
            let name_of = |item: &Value| item.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
            if truthy(&self.use_regex) {
                let pattern = regex::RegexBuilder::new(name)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| bad_request(format!("name is not a regular expression: {e}")))?;
                items.retain(|item| pattern.is_match(&name_of(item)));
            } else {
                let needle = name.to_lowercase();
                items.retain(|item| name_of(item).to_lowercase().contains(&needle));
            }
        }
        let filtered = items.len();
        // By name unless told otherwise, as RabbitMQ lists (a stable sort: bindings, which
        // have no name, keep their order).
        let sort = self.sort.as_deref().filter(|s| !s.is_empty()).unwrap_or("name");
        items.sort_by(|a, b| compare(field(a, sort), field(b, sort)));
        if truthy(&self.sort_reverse) {
            items.reverse();
        }
        let columns: Vec<&str> =
            self.columns.as_deref().map(|c| c.split(',').filter(|c| !c.is_empty()).collect()).unwrap_or_default();
        let trim = |items: Vec<Value>| -> Vec<Value> {
            if columns.is_empty() {
                items
            } else {
                items.iter().map(|item| only_columns(item, &columns)).collect()
            }
        };
        let Some(page) = self.page else { return Ok(Value::Array(trim(items))) };
        let page_size = self.page_size.unwrap_or(DEFAULT_PAGE_SIZE);
        if page == 0 || page_size == 0 || page_size > MAX_PAGE_SIZE {
            return Err(bad_request(format!("page must be at least 1 and page_size from 1 to {MAX_PAGE_SIZE}")));
        }
        let page_count = filtered.div_ceil(page_size).max(1);
        if page > page_count {
            return Err(bad_request(format!("page {page} is past the last page, {page_count}")));
        }
        let shown: Vec<Value> = items.into_iter().skip((page - 1) * page_size).take(page_size).collect();
        Ok(json!({
            "filtered_count": filtered,
            "item_count": shown.len(),
            "items": trim(shown),
            "page": page,
            "page_count": page_count,
            "page_size": page_size,
            "total_count": total,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues() -> Vec<Value> {
        (0..25)
            .map(|i| json!({"name": format!("q{i:02}"), "messages": (i * 7) % 25, "message_stats": {"rate": i}}))
            .collect()
    }

    fn query(pairs: &[(&str, &str)]) -> ListQuery {
        let text: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        serde_urlencoded_like(&text.join("&"))
    }

    /// The query string as axum's `Query` would read it.
    fn serde_urlencoded_like(text: &str) -> ListQuery {
        let uri: axum::http::Uri = format!("/x?{text}").parse().expect("uri");
        axum::extract::Query::<ListQuery>::try_from_uri(&uri).expect("query").0
    }

    #[test]
    fn pages_sort_by_nested_fields_and_keep_columns() {
        let listed = query(&[
            ("page", "2"),
            ("page_size", "10"),
            ("sort", "messages"),
            ("sort_reverse", "true"),
            ("columns", "name,message_stats.rate"),
        ])
        .apply(queues())
        .expect("listed");
        assert_eq!(listed["page_count"], 3);
        assert_eq!(listed["total_count"], 25);
        assert_eq!(listed["item_count"], 10);
        let first = &listed["items"][0];
        assert!(first.get("messages").is_none(), "only the columns asked for: {first}");
        assert!(first["message_stats"]["rate"].is_number());
        assert!(query(&[("page", "4"), ("page_size", "10")]).apply(queues()).is_err(), "past the last page");
    }

    #[test]
    fn names_filter_by_substring_or_regex() {
        let plain = query(&[("name", "Q1")]).apply(queues()).expect("listed");
        assert_eq!(plain.as_array().map(Vec::len), Some(10), "q10..q19, case-insensitively");
        let regex = query(&[("name", "^q0[1-3]$"), ("use_regex", "true")]).apply(queues()).expect("listed");
        assert_eq!(regex.as_array().map(Vec::len), Some(3));
        assert!(query(&[("name", "("), ("use_regex", "true")]).apply(queues()).is_err());
    }
}
