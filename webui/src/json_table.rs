//! AMQP field tables as RabbitMQ's management API writes them in JSON: plain objects
//! (`{"x-queue-type": "quorum", "x-max-length": 10}`), both ways. JSON from a client nests at
//! most [`MAX_NESTING_DEPTH`] levels, as field tables on the wire do.

use amq_protocol::types::{AMQPValue, FieldArray, FieldTable, LongString, ShortString};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{Map, Number, Value};
use warren_delivery::field_table::MAX_NESTING_DEPTH;

/// A table as JSON.
pub fn to_json(table: &FieldTable) -> Value {
    Value::Object(table.inner().iter().map(|(key, value)| (key.to_string(), value_to_json(value))).collect())
}

fn value_to_json(value: &AMQPValue) -> Value {
    match value {
        AMQPValue::Boolean(b) => Value::Bool(*b),
        AMQPValue::ShortShortInt(v) => Value::from(*v),
        AMQPValue::ShortShortUInt(v) => Value::from(*v),
        AMQPValue::ShortInt(v) => Value::from(*v),
        AMQPValue::ShortUInt(v) => Value::from(*v),
        AMQPValue::LongInt(v) => Value::from(*v),
        AMQPValue::LongUInt(v) => Value::from(*v),
        AMQPValue::LongLongInt(v) => Value::from(*v),
        AMQPValue::Float(v) => Number::from_f64(f64::from(*v)).map_or(Value::Null, Value::Number),
        AMQPValue::Double(v) => Number::from_f64(*v).map_or(Value::Null, Value::Number),
        AMQPValue::DecimalValue(d) => Value::from(d.value as f64 / 10f64.powi(i32::from(d.scale))),
        AMQPValue::ShortString(s) => Value::String(s.to_string()),
        AMQPValue::LongString(s) => match std::str::from_utf8(s.as_bytes()) {
            Ok(text) => Value::String(text.to_string()),
            Err(_) => Value::String(STANDARD.encode(s.as_bytes())),
        },
        AMQPValue::FieldArray(array) => Value::Array(array.as_slice().iter().map(value_to_json).collect()),
        AMQPValue::Timestamp(t) => Value::from(*t),
        AMQPValue::FieldTable(table) => to_json(table),
        AMQPValue::ByteArray(bytes) => Value::String(STANDARD.encode(bytes.as_slice())),
        AMQPValue::Void => Value::Null,
    }
}

/// A JSON object as a table: integers as 64-bit integers, other numbers as doubles, strings
/// as long strings. Anything but an object, or one nested too deep, is refused with a text
/// saying why.
pub fn from_json(value: &Value) -> Result<FieldTable, String> {
    match value {
        Value::Object(map) => table_from(map, 1),
        Value::Null => Ok(FieldTable::default()),
        other => Err(format!("arguments must be a JSON object, not {other}")),
    }
}

fn table_from(map: &Map<String, Value>, depth: usize) -> Result<FieldTable, String> {
    if depth > MAX_NESTING_DEPTH {
        return Err(format!("arguments nest deeper than {MAX_NESTING_DEPTH} levels"));
    }
    let mut table = FieldTable::default();
    for (key, value) in map {
        let key = ShortString::try_new(key.clone()).map_err(|_| format!("key {key:?} is longer than 255 bytes"))?;
        table.insert(key, value_from(value, depth)?);
    }
    Ok(table)
}

fn value_from(value: &Value, depth: usize) -> Result<AMQPValue, String> {
    Ok(match value {
        Value::Null => AMQPValue::Void,
        Value::Bool(b) => AMQPValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(v) => AMQPValue::LongLongInt(v),
            None => AMQPValue::Double(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => AMQPValue::LongString(LongString::from(s.as_bytes())),
        Value::Array(items) => {
            if depth + 1 > MAX_NESTING_DEPTH {
                return Err(format!("arguments nest deeper than {MAX_NESTING_DEPTH} levels"));
            }
            let values = items.iter().map(|item| value_from(item, depth + 1)).collect::<Result<Vec<_>, _>>()?;
            AMQPValue::FieldArray(FieldArray::from(values))
        }
        Value::Object(map) => AMQPValue::FieldTable(table_from(map, depth + 1)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_go_both_ways() {
        let arguments = json!({"x-queue-type": "quorum", "x-max-length": 10, "x-ratio": 0.5, "on": true,
            "list": ["a", 1], "nested": {"k": "v"}});
        let table = from_json(&arguments).expect("converts");
        assert_eq!(to_json(&table), arguments);
    }

    #[test]
    fn deep_or_odd_json_is_refused() {
        let mut deep = json!("leaf");
        for _ in 0..MAX_NESTING_DEPTH + 1 {
            deep = json!({ "k": deep });
        }
        assert!(from_json(&deep).is_err_and(|e| e.contains("deeper")));
        assert!(from_json(&json!([1, 2])).is_err_and(|e| e.contains("JSON object")));
        assert_eq!(from_json(&Value::Null).map(|t| t.inner().len()), Ok(0));
    }
}
