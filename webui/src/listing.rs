//! The list endpoints' query parameters, as RabbitMQ's management API reads them: `name`
//! (a substring, or a regular expression with `use_regex=true`), `sort` (a field, dotted for
//! nested ones: `message_stats.publish_details.rate`), `sort_reverse`, `page` and
//! `page_size` (answered with RabbitMQ's paged shape), and `columns` (only these fields,
//! dotted too).
//!
//! Listing is generic over [`Listed`] so that 10,000 queues are filtered and sorted on the
//! figures they already hold: only the page shown is turned into JSON, and a whole list (no
//! `page`) is streamed, each item turned into JSON as the client reads (see `streamed`).

use crate::error::ApiError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::cmp::Ordering;

/// The largest page RabbitMQ serves, and so Warren.
pub const MAX_PAGE_SIZE: usize = 500;
/// The page size when `page` is given alone.
const DEFAULT_PAGE_SIZE: usize = 100;
/// Longest `name` filter accepted (a regular expression is compiled from it).
const MAX_FILTER_BYTES: usize = 1024;
/// Most `columns` one list may ask for (each is looked up in every item).
const MAX_COLUMNS: usize = 64;

/// What a list request asked for.
#[derive(Debug, Default, Clone, PartialEq, Eq, Hash, Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    name: Option<String>,
    #[serde(default, deserialize_with = "crate::lenient::optional_flag")]
    use_regex: Option<bool>,
    #[serde(default)]
    sort: Option<String>,
    #[serde(default, deserialize_with = "crate::lenient::optional_flag")]
    sort_reverse: Option<bool>,
    #[serde(default, deserialize_with = "crate::lenient::optional_count")]
    page: Option<usize>,
    #[serde(default, deserialize_with = "crate::lenient::optional_count")]
    page_size: Option<usize>,
    #[serde(default)]
    columns: Option<String>,
}

/// An item a list endpoint answers with.
pub trait Listed {
    /// What the `name` filter matches.
    fn name(&self) -> &str;
    /// The value sorted on for the field at dotted `path`.
    fn sort_key(&self, path: &str) -> SortKey;
    /// The item as the API shows it.
    fn into_json(self) -> Value;
}

impl Listed for Value {
    fn name(&self) -> &str {
        self.get("name").and_then(Value::as_str).unwrap_or_default()
    }

    fn sort_key(&self, path: &str) -> SortKey {
        SortKey::of(field(self, path))
    }

    fn into_json(self) -> Value {
        self
    }
}

/// A field's value as a table's column sorts it: missing first, then booleans, numbers, and
/// text (case-insensitively).
#[derive(Debug, Clone, PartialEq)]
pub enum SortKey {
    /// The item has no such field.
    Missing,
    /// A boolean field.
    Bool(bool),
    /// A numeric field.
    Number(f64),
    /// A text field, lowercased.
    Text(String),
    /// Anything else (objects, arrays), by its JSON text.
    Other(String),
}

impl SortKey {
    /// The key of a JSON field.
    pub fn of(value: Option<&Value>) -> SortKey {
        match value {
            None | Some(Value::Null) => SortKey::Missing,
            Some(Value::Bool(b)) => SortKey::Bool(*b),
            Some(Value::Number(n)) => SortKey::Number(n.as_f64().unwrap_or_default()),
            Some(Value::String(s)) => SortKey::text(s),
            Some(other) => SortKey::Other(other.to_string()),
        }
    }

    /// The key of a text field.
    pub fn text(text: &str) -> SortKey {
        SortKey::Text(text.to_lowercase())
    }

    fn rank(&self) -> u8 {
        match self {
            SortKey::Missing => 0,
            SortKey::Bool(_) => 1,
            SortKey::Number(_) => 2,
            SortKey::Text(_) => 3,
            SortKey::Other(_) => 4,
        }
    }

    fn compare(&self, other: &SortKey) -> Ordering {
        match (self, other) {
            (SortKey::Bool(x), SortKey::Bool(y)) => x.cmp(y),
            (SortKey::Number(x), SortKey::Number(y)) => x.total_cmp(y),
            (SortKey::Text(x), SortKey::Text(y)) | (SortKey::Other(x), SortKey::Other(y)) => x.cmp(y),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

/// The field at `path` (dots between names) of `item`.
pub fn field<'a>(item: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(item, |value, key| value.get(key))
}

/// Keeps only `columns` (dotted paths) of `item`, nested as they were.
fn only_columns(item: &Value, columns: &[String]) -> Value {
    let mut kept = Map::new();
    for column in columns {
        if let Some(value) = field(item, column) {
            put(&mut kept, column, value.clone());
        }
    }
    Value::Object(kept)
}

/// `item` with only `columns` (all of it if none were asked for).
fn trim(item: Value, columns: &[String]) -> Value {
    if columns.is_empty() {
        return item;
    }
    only_columns(&item, columns)
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

/// What to do with a `page` past the last one.
#[derive(Debug, Clone, Copy, PartialEq)]
enum PastLastPage {
    /// 400, as RabbitMQ's API answers.
    Refuse,
    /// Show the last page: a live table whose filter just shrank the list.
    ShowLast,
}

fn bad_request(text: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, text)
}

impl ListQuery {
    /// Filters, sorts, pages and trims `items`, answering as RabbitMQ does: a plain array
    /// without `page`, the paged object with it. A bad regular expression or page is 400.
    pub fn apply<T: Listed>(&self, items: Vec<T>) -> Result<Value, ApiError> {
        self.list(items, PastLastPage::Refuse)
    }

    /// The answer of a list route: the page asked for, or the whole list streamed.
    pub fn answer<T: Listed + Send + 'static>(&self, items: Vec<T>) -> Result<Response, ApiError> {
        if self.page.is_some() {
            return Ok(Json(self.apply(items)?).into_response());
        }
        let columns = self.columns()?;
        let ordered = self.ordered(items)?;
        Ok(crate::streamed::json_array(ordered.map(move |item| trim(item.into_json(), &columns))))
    }

    /// The same query, answering with its first page if it named none.
    pub fn paged(mut self) -> ListQuery {
        self.page.get_or_insert(1);
        self
    }

    /// As [`ListQuery::apply`], but a page past the last one shows the last one.
    pub fn apply_to_live_table<T: Listed>(&self, items: Vec<T>) -> Result<Value, ApiError> {
        self.list(items, PastLastPage::ShowLast)
    }

    /// The items the name filter keeps, in the order asked for.
    fn ordered<T: Listed>(&self, mut items: Vec<T>) -> Result<impl Iterator<Item = T>, ApiError> {
        self.filter_by_name(&mut items)?;
        Ok(self.sorted(items))
    }

    fn list<T: Listed>(&self, mut items: Vec<T>, past_last: PastLastPage) -> Result<Value, ApiError> {
        let page_size = self.page_size.unwrap_or(DEFAULT_PAGE_SIZE);
        if self.page == Some(0) || page_size == 0 || page_size > MAX_PAGE_SIZE {
            return Err(bad_request(format!("page must be at least 1 and page_size from 1 to {MAX_PAGE_SIZE}")));
        }
        let columns = self.columns()?;
        let total = items.len();
        self.filter_by_name(&mut items)?;
        let filtered = items.len();
        let ordered = self.sorted(items);
        let Some(asked) = self.page else {
            return Ok(Value::Array(ordered.map(|item| trim(item.into_json(), &columns)).collect()));
        };
        let page_count = filtered.div_ceil(page_size).max(1);
        let page = match past_last {
            _ if asked <= page_count => asked,
            PastLastPage::ShowLast => page_count,
            PastLastPage::Refuse => {
                return Err(bad_request(format!("page {asked} is past the last page, {page_count}")))
            }
        };
        let shown: Vec<Value> =
            ordered.skip((page - 1) * page_size).take(page_size).map(|item| trim(item.into_json(), &columns)).collect();
        Ok(json!({
            "filtered_count": filtered,
            "item_count": shown.len(),
            "items": shown,
            "page": page,
            "page_count": page_count,
            "page_size": page_size,
            "total_count": total,
        }))
    }

    fn filter_by_name<T: Listed>(&self, items: &mut Vec<T>) -> Result<(), ApiError> {
        let Some(name) = self.name.as_deref().filter(|n| !n.is_empty()) else { return Ok(()) };
        if name.len() > MAX_FILTER_BYTES {
            return Err(bad_request(format!("the name filter is longer than {MAX_FILTER_BYTES} bytes")));
        }
        if self.use_regex == Some(true) {
            let pattern = regex::RegexBuilder::new(name)
                .size_limit(1 << 20)
                .build()
                .map_err(|e| bad_request(format!("name is not a regular expression: {e}")))?;
            items.retain(|item| pattern.is_match(item.name()));
        } else {
            let needle = name.to_lowercase();
            items.retain(|item| item.name().to_lowercase().contains(&needle));
        }
        Ok(())
    }

    /// The items in the order asked for: by name unless told otherwise, as RabbitMQ lists
    /// (a stable sort: bindings, which have no name, keep their order). Each key is computed
    /// once, not once per comparison.
    fn sorted<T: Listed>(&self, items: Vec<T>) -> impl Iterator<Item = T> {
        let sort = self.sort.as_deref().filter(|s| !s.is_empty()).unwrap_or("name");
        let mut keyed: Vec<(SortKey, T)> = items.into_iter().map(|item| (item.sort_key(sort), item)).collect();
        keyed.sort_by(|a, b| a.0.compare(&b.0));
        if self.sort_reverse == Some(true) {
            keyed.reverse();
        }
        // The keys go before the items are shown: a streamed list holds only its items.
        let items: Vec<T> = keyed.into_iter().map(|(_, item)| item).collect();
        items.into_iter()
    }

    /// The `columns` asked for (dotted paths), if any: at most [`MAX_COLUMNS`].
    fn columns(&self) -> Result<Vec<String>, ApiError> {
        let asked = self.columns.as_deref().unwrap_or_default();
        let columns: Vec<String> = asked.split(',').filter(|c| !c.is_empty()).map(str::to_string).collect();
        if columns.len() > MAX_COLUMNS {
            return Err(bad_request(format!("at most {MAX_COLUMNS} columns may be asked for")));
        }
        Ok(columns)
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

    #[test]
    fn a_live_table_past_its_last_page_shows_the_last() {
        let listed = query(&[("page", "9"), ("page_size", "10")]).apply_to_live_table(queues()).expect("listed");
        assert_eq!((listed["page"].as_u64(), listed["item_count"].as_u64()), (Some(3), Some(5)));
        let first = query(&[("name", "q2")]).paged().apply(queues()).expect("listed");
        assert_eq!((first["page"].as_u64(), first["filtered_count"].as_u64()), (Some(1), Some(5)));
    }

    #[test]
    fn missing_fields_sort_first_and_text_ignores_case() {
        let items = vec![json!({"name": "b", "n": 2}), json!({"name": "A"}), json!({"name": "c", "n": 1})];
        let listed = query(&[("sort", "n")]).apply(items.clone()).expect("listed");
        let names: Vec<&str> = listed.as_array().expect("items").iter().filter_map(|i| i["name"].as_str()).collect();
        assert_eq!(names, ["A", "c", "b"]);
        let by_name = query(&[("sort_reverse", "true")]).apply(items).expect("listed");
        assert_eq!(by_name[0]["name"], "c");
        assert_eq!(by_name[2]["name"], "A");
    }
}
