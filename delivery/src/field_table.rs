//! Field tables as clients send them: how deep they may nest, checked before anything recurses.
//!
//! amq-protocol's decoder recurses once per nested table or array, and so does everything that
//! walks a decoded table afterwards (equivalence, x-death rewriting, the JSON of the stored
//! definitions). A client nesting a thousand levels in a few kilobytes would overflow a
//! worker's stack. So every table that arrives on the wire is first walked here, with the depth
//! bounded, and only what passes reaches the decoder; tables that come from elsewhere (the
//! definitions file) are measured after decoding with [`check_depth`].

use amq_protocol::types::{parsing::parse_field_table, AMQPValue, FieldTable};

/// How deep tables and arrays may nest: a flat table is one level, a table or array inside it
/// two. Far more than any client uses, far less than a worker's stack allows, and small
/// enough that the stored definitions (two JSON levels per field-table level) stay within
/// the JSON reader's own recursion limit.
pub const MAX_NESTING_DEPTH: usize = 32;

/// Why a field table was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FieldTableError {
    /// Tables or arrays nested deeper than [`MAX_NESTING_DEPTH`].
    #[error("field table nested deeper than {MAX_NESTING_DEPTH} levels")]
    TooDeep,
    /// Truncated, longer than announced, or a value of unknown type.
    #[error("malformed field table")]
    Malformed,
}

/// Checks the table at the start of `bytes` (its 4-byte length first) and returns how many
/// bytes it takes. Only lengths, type tags and depth are checked; the decoder checks the rest.
pub fn check_wire_table(bytes: &[u8]) -> Result<usize, FieldTableError> {
    let body = length_prefixed(bytes)?;
    check_entries(body, 1, true)?;
    Ok(4 + body.len())
}

/// Decodes a table that is exactly `bytes` (length prefix included), its depth checked first.
pub fn decode(bytes: &[u8]) -> Result<FieldTable, FieldTableError> {
    if check_wire_table(bytes)? != bytes.len() {
        return Err(FieldTableError::Malformed);
    }
    match parse_field_table(bytes) {
        Ok(([], table)) => Ok(table),
        _ => Err(FieldTableError::Malformed),
    }
}

/// Refuses a decoded table nested deeper than [`MAX_NESTING_DEPTH`].
pub fn check_depth(table: &FieldTable) -> Result<(), FieldTableError> {
    if table_depth(table, 1) > MAX_NESTING_DEPTH {
        return Err(FieldTableError::TooDeep);
    }
    Ok(())
}

/// The depth of `table` at `level`, not looking below `MAX_NESTING_DEPTH + 1`.
fn table_depth(table: &FieldTable, level: usize) -> usize {
    table.inner().values().map(|value| value_depth(value, level)).max().unwrap_or(level)
}

fn value_depth(value: &AMQPValue, level: usize) -> usize {
    if level > MAX_NESTING_DEPTH {
        return level;
    }
    match value {
        AMQPValue::FieldTable(inner) => table_depth(inner, level + 1),
        AMQPValue::FieldArray(items) => {
            items.as_slice().iter().map(|item| value_depth(item, level + 1)).max().unwrap_or(level + 1)
        }
        _ => level,
    }
}

/// The body of a length-prefixed item at the start of `bytes`.
fn length_prefixed(bytes: &[u8]) -> Result<&[u8], FieldTableError> {
    let prefix: [u8; 4] = bytes.get(..4).and_then(|p| p.try_into().ok()).ok_or(FieldTableError::Malformed)?;
    let len = u32::from_be_bytes(prefix) as usize;
    bytes.get(4..4usize.saturating_add(len)).ok_or(FieldTableError::Malformed)
}

/// Walks the entries of a table (`keyed`) or an array body at nesting `depth`.
fn check_entries(mut body: &[u8], depth: usize, keyed: bool) -> Result<(), FieldTableError> {
    if depth > MAX_NESTING_DEPTH {
        return Err(FieldTableError::TooDeep);
    }
    while !body.is_empty() {
        if keyed {
            let key_len = *body.first().ok_or(FieldTableError::Malformed)? as usize;
            body = body.get(1 + key_len..).ok_or(FieldTableError::Malformed)?;
        }
        let used = check_value(body, depth)?;
        body = &body[used..];
    }
    Ok(())
}

/// Checks the value at the start of `bytes` (type tag first); returns the bytes it takes.
fn check_value(bytes: &[u8], depth: usize) -> Result<usize, FieldTableError> {
    let (&tag, rest) = bytes.split_first().ok_or(FieldTableError::Malformed)?;
    let used = match tag {
        b'V' => 0,
        b't' | b'b' | b'B' => 1,
        b's' | b'U' | b'u' => 2,
        b'I' | b'i' | b'f' => 4,
        b'D' => 5,
        b'L' | b'l' | b'd' | b'T' => 8,
        b'S' | b'x' => 4 + length_prefixed(rest)?.len(),
        b'F' | b'A' => {
            let body = length_prefixed(rest)?;
            check_entries(body, depth + 1, tag == b'F')?;
            4 + body.len()
        }
        _ => return Err(FieldTableError::Malformed),
    };
    if rest.len() < used {
        return Err(FieldTableError::Malformed);
    }
    Ok(1 + used)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use amq_protocol::types::{generation::gen_field_table, FieldArray, LongString};

    pub(crate) fn encode(table: &FieldTable) -> Vec<u8> {
        gen_field_table(table)(amq_protocol::frame::WriteContext::from(Vec::new())).map(|c| c.write).unwrap_or_default()
    }

    /// A table `depth` levels deep: tables inside tables, or (with `arrays`) arrays inside.
    pub(crate) fn nested(depth: usize, arrays: bool) -> FieldTable {
        let mut value = AMQPValue::LongString(LongString::from("leaf"));
        for _ in 1..depth {
            value = if arrays {
                AMQPValue::FieldArray(FieldArray::from(vec![value]))
            } else {
                let mut table = FieldTable::default();
                table.insert("k".into(), value);
                AMQPValue::FieldTable(table)
            };
        }
        let mut top = FieldTable::default();
        top.insert("k".into(), value);
        top
    }

    #[test]
    fn accepts_up_to_the_limit_and_refuses_beyond() {
        for arrays in [false, true] {
            let deepest = nested(MAX_NESTING_DEPTH, arrays);
            assert_eq!(decode(&encode(&deepest)), Ok(deepest.clone()));
            assert_eq!(check_depth(&deepest), Ok(()));
            let too_deep = nested(MAX_NESTING_DEPTH + 1, arrays);
            assert_eq!(decode(&encode(&too_deep)), Err(FieldTableError::TooDeep));
            assert_eq!(check_depth(&too_deep), Err(FieldTableError::TooDeep));
        }
    }

    #[test]
    fn refuses_thousands_of_levels_without_recursing_into_them() {
        // 100,000 nested empty-keyed arrays, built as bytes: far beyond what would overflow.
        let levels = 100_000usize;
        let mut bytes = Vec::new();
        for level in 0..levels {
            let inner = (levels - level - 1) * 5;
            bytes.push(b'A');
            bytes.extend_from_slice(&(inner as u32).to_be_bytes());
        }
        let mut table = Vec::new();
        table.extend_from_slice(&((bytes.len() + 2) as u32).to_be_bytes());
        table.extend_from_slice(&[1, b'k']);
        table.extend_from_slice(&bytes);
        assert_eq!(check_wire_table(&table), Err(FieldTableError::TooDeep));
    }

    #[test]
    fn measures_every_value_type_and_refuses_malformed_tables() {
        let mut table = FieldTable::default();
        for (key, value) in [
            ("t", AMQPValue::Boolean(true)),
            ("b", AMQPValue::ShortShortInt(-1)),
            ("s", AMQPValue::ShortInt(-2)),
            ("i", AMQPValue::LongUInt(3)),
            ("l", AMQPValue::LongLongInt(4)),
            ("f", AMQPValue::Float(0.5)),
            ("d", AMQPValue::Double(0.25)),
            ("D", AMQPValue::DecimalValue(amq_protocol::types::DecimalValue { scale: 1, value: 5 })),
            ("T", AMQPValue::Timestamp(6)),
            ("x", AMQPValue::ByteArray(vec![1, 2, 3].into())),
            ("V", AMQPValue::Void),
            ("A", AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::Boolean(false)]))),
        ] {
            table.insert(key.into(), value);
        }
        let bytes = encode(&table);
        assert_eq!(check_wire_table(&bytes), Ok(bytes.len()));
        assert_eq!(decode(&bytes), Ok(table));
        assert_eq!(decode(&bytes[..bytes.len() - 1]), Err(FieldTableError::Malformed));
        let mut unknown = bytes.clone();
        unknown[6] = b'?';
        assert_eq!(check_wire_table(&unknown), Err(FieldTableError::Malformed));
    }
}
