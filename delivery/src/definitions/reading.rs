//! Reading the definitions file leniently: a record that cannot be read back is left out on
//! its own, with the reason, instead of keeping the whole virtual host down.
//!
//! The document is first split into its records as raw JSON text (serde_json skips over a
//! raw value without recursing, so however deep a record nests, the split succeeds); then each
//! record is read into its type, and its field tables are measured against
//! [`field_table::MAX_NESTING_DEPTH`], the limit the protocol enforces on input. Only a file
//! that is not JSON at all, or whose sections are not lists, is refused as a whole.

use super::{BindingRecord, Definitions, ExchangeRecord, QueueRecord};
use crate::{client_text, field_table};
use amq_protocol::types::FieldTable;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::path::PathBuf;

/// What kind of definition a record holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EntityKind {
    /// A durable exchange.
    Exchange,
    /// A durable queue or stream.
    Queue,
    /// A binding between durable things.
    Binding,
}

impl EntityKind {
    /// Its name in logs and in the unreadable file.
    pub fn as_str(self) -> &'static str {
        match self {
            EntityKind::Exchange => "exchange",
            EntityKind::Queue => "queue",
            EntityKind::Binding => "binding",
        }
    }
}

/// A stored definition that cannot be read back: left out of the restored virtual host and
/// kept, as it was stored, in the unreadable file beside the definitions.
#[derive(Debug, Serialize)]
pub struct LeftOut {
    /// What it is.
    pub kind: EntityKind,
    /// Its name, if that much can be read (a binding's is `source -> destination`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Why it was left out.
    pub reason: String,
    /// Where its data directory was (a queue's, a stream's, a delayed exchange's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_moved_from: Option<PathBuf>,
    /// Where its data directory was moved to, out of reach of deletes and new declares. For
    /// a record whose name cannot be read: the folder holding every directory that no
    /// readable record owned, one of which is its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_moved_to: Option<PathBuf>,
    /// The record as it was stored.
    pub record: Box<RawValue>,
}

impl LeftOut {
    /// A record that was read but cannot be restored (invalid arguments, a missing end).
    pub fn of_record(kind: EntityKind, name: Option<String>, reason: String, record: &impl Serialize) -> Self {
        let record = serde_json::value::to_raw_value(record).unwrap_or_default();
        LeftOut { kind, name, reason, data_moved_from: None, data_moved_to: None, record }
    }
}

/// The stored definitions as far as they can be read.
#[derive(Debug, Default)]
pub struct LoadedDefinitions {
    /// The records that were read.
    pub definitions: Definitions,
    /// The records that were not, in file order within each kind.
    pub left_out: Vec<LeftOut>,
    /// Whether there was a definitions file at all.
    pub found: bool,
    /// The generation of the journal that follows the file (0 for a file written before
    /// there were journals).
    pub generation: u64,
    /// Where reading the journal stopped before its end (the byte, and why), if it did.
    pub journal_damage: Option<(u64, String)>,
}

/// The document split into raw records; unknown sections are ignored.
#[derive(Deserialize)]
struct RawDocument {
    #[serde(default)]
    journal: u64,
    #[serde(default)]
    exchanges: Vec<Box<RawValue>>,
    #[serde(default)]
    queues: Vec<Box<RawValue>>,
    #[serde(default)]
    bindings: Vec<Box<RawValue>>,
}

/// The fields that name a record, read on their own when the whole record cannot be.
#[derive(Deserialize, Default)]
struct Identity {
    #[serde(default)]
    name: Option<serde_json::Value>,
    #[serde(default)]
    source: Option<serde_json::Value>,
    #[serde(default)]
    destination: Option<serde_json::Value>,
}

/// A stored record: its name for logs and the field table it carries.
pub(super) trait StoredRecord: DeserializeOwned {
    /// What kind of record this is.
    const KIND: EntityKind;
    /// Its name (a binding's is `source -> destination`).
    fn name(&self) -> String;
    /// Its arguments.
    fn arguments(&self) -> &FieldTable;
}

impl StoredRecord for ExchangeRecord {
    const KIND: EntityKind = EntityKind::Exchange;
    fn name(&self) -> String {
        self.name.clone()
    }
    fn arguments(&self) -> &FieldTable {
        &self.arguments
    }
}

impl StoredRecord for QueueRecord {
    const KIND: EntityKind = EntityKind::Queue;
    fn name(&self) -> String {
        self.name.clone()
    }
    fn arguments(&self) -> &FieldTable {
        &self.arguments
    }
}

impl StoredRecord for BindingRecord {
    const KIND: EntityKind = EntityKind::Binding;
    fn name(&self) -> String {
        binding_name(&self.source, &self.destination)
    }
    fn arguments(&self) -> &FieldTable {
        &self.arguments
    }
}

/// How a binding is named in logs and in the unreadable file.
pub fn binding_name(source: &str, destination: &str) -> String {
    format!("{source} -> {destination}")
}

/// Reads `bytes` leniently. Errs (with serde's reason) only when the document as a whole
/// cannot be split into records.
pub(super) fn read(bytes: &[u8]) -> Result<LoadedDefinitions, String> {
    let document: RawDocument = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let mut loaded = LoadedDefinitions { found: true, generation: document.journal, ..LoadedDefinitions::default() };
    read_records(document.exchanges, &mut loaded.definitions.exchanges, &mut loaded.left_out);
    read_records(document.queues, &mut loaded.definitions.queues, &mut loaded.left_out);
    read_records(document.bindings, &mut loaded.definitions.bindings, &mut loaded.left_out);
    Ok(loaded)
}

fn read_records<R: StoredRecord>(raws: Vec<Box<RawValue>>, read: &mut Vec<R>, left_out: &mut Vec<LeftOut>) {
    for raw in raws {
        match read_record::<R>(&raw) {
            Ok(record) => read.push(record),
            Err(reason) => left_out.push(LeftOut {
                kind: R::KIND,
                name: identity(R::KIND, &raw),
                reason,
                data_moved_from: None,
                data_moved_to: None,
                record: raw,
            }),
        }
    }
}

fn read_record<R: StoredRecord>(raw: &RawValue) -> Result<R, String> {
    let record: R = serde_json::from_str(raw.get()).map_err(|e| {
        let e = e.to_string();
        if e.starts_with("recursion limit exceeded") {
            format!(
                "nested too deeply to read ({e}); field tables may nest at most {} levels",
                field_table::MAX_NESTING_DEPTH
            )
        } else {
            format!("not a valid {} record: {e}", R::KIND.as_str())
        }
    })?;
    check_depth(&record)?;
    Ok(record)
}

/// Refuses a record whose arguments nest deeper than the protocol accepts.
pub(super) fn check_depth<R: StoredRecord>(record: &R) -> Result<(), String> {
    field_table::check_depth(record.arguments()).map_err(|e| format!("its arguments: {e}"))
}

/// The name of a record that cannot be read as a whole, if its naming fields can be.
fn identity(kind: EntityKind, raw: &RawValue) -> Option<String> {
    let identity: Identity = serde_json::from_str(raw.get()).unwrap_or_default();
    let text = |value: Option<serde_json::Value>| match value {
        Some(serde_json::Value::String(text)) => Some(text),
        _ => None,
    };
    match kind {
        EntityKind::Binding => {
            let (source, destination) = (text(identity.source), text(identity.destination));
            Some(binding_name(source.as_deref()?, destination.as_deref()?))
        }
        EntityKind::Exchange | EntityKind::Queue => text(identity.name),
    }
}

/// Leaves out of `definitions` (with an error log) every record nested deeper than the
/// protocol accepts, so that what is saved can always be read back.
pub(super) fn drop_too_deep(definitions: &mut Definitions) {
    fn retain<R: StoredRecord>(records: &mut Vec<R>) {
        records.retain(|record| match check_depth(record) {
            Ok(()) => true,
            Err(reason) => {
                tracing::error!(
                    kind = R::KIND.as_str(),
                    name = %shown(&record.name()),
                    reason = %shown(&reason),
                    "not saving a definition that could not be read back: it will not survive a restart"
                );
                false
            }
        });
    }
    retain(&mut definitions.exchanges);
    retain(&mut definitions.queues);
    retain(&mut definitions.bindings);
}

/// Text from the file (a name, a reason quoting it) as logged: escaped and bounded.
pub(super) fn shown(text: &str) -> String {
    client_text::sanitize(text, client_text::MAX_TEXT_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field_table::tests::nested;

    fn queue(name: &str, arguments: FieldTable) -> serde_json::Value {
        serde_json::to_value(QueueRecord { name: name.into(), auto_delete: false, arguments, homes: Vec::new() })
            .expect("json")
    }

    /// A queue record whose arguments nest `depth` levels, as JSON text (serde_json's own
    /// writer has no depth limit, but its `Value` reader does).
    fn deep_queue_text(name: &str, depth: usize) -> String {
        let mut value = r#"{"LongString":[108]}"#.to_string();
        for _ in 1..depth {
            value = format!(r#"{{"FieldTable":{{"k":{value}}}}}"#);
        }
        format!(r#"{{"name":"{name}","auto_delete":false,"arguments":{{"k":{value}}}}}"#)
    }

    fn document(queues: &[String]) -> Vec<u8> {
        format!(r#"{{"exchanges":[],"queues":[{}],"bindings":[]}}"#, queues.join(",")).into_bytes()
    }

    fn names(loaded: &LoadedDefinitions) -> Vec<&str> {
        loaded.definitions.queues.iter().map(|q| q.name.as_str()).collect()
    }

    #[test]
    fn reads_what_was_saved_up_to_the_depth_limit() {
        let deepest = queue("deepest", nested(field_table::MAX_NESTING_DEPTH, false));
        let arrays = queue("arrays", nested(field_table::MAX_NESTING_DEPTH, true));
        let loaded = read(&document(&[deepest.to_string(), arrays.to_string()])).expect("read");
        assert_eq!(names(&loaded), ["deepest", "arrays"]);
        assert!(loaded.left_out.is_empty());
        assert_eq!(loaded.definitions.queues[0].arguments, nested(field_table::MAX_NESTING_DEPTH, false));
    }

    #[test]
    fn leaves_out_only_the_records_that_cannot_be_read() {
        let healthy = queue("healthy", FieldTable::default()).to_string();
        let unknown_type = r#"{"name":"unknown","auto_delete":false,"arguments":{"k":{"Bogus":1}}}"#.to_string();
        let too_deep = deep_queue_text("forty", 40);
        let beyond_the_reader = deep_queue_text("seventy", 70);
        let nameless = r#"{"auto_delete":false,"arguments":{}}"#.to_string();
        let not_an_object = "[1,2]".to_string();
        let bytes = document(&[unknown_type, healthy, too_deep, beyond_the_reader.clone(), nameless, not_an_object]);
        let loaded = read(&bytes).expect("a partly damaged file is still read");
        assert_eq!(names(&loaded), ["healthy"]);
        let left: Vec<(EntityKind, Option<&str>)> =
            loaded.left_out.iter().map(|l| (l.kind, l.name.as_deref())).collect();
        assert_eq!(
            left,
            [
                (EntityKind::Queue, Some("unknown")),
                (EntityKind::Queue, Some("forty")),
                (EntityKind::Queue, Some("seventy")),
                (EntityKind::Queue, None),
                (EntityKind::Queue, None),
            ]
        );
        assert!(loaded.left_out[0].reason.contains("Bogus"), "{}", loaded.left_out[0].reason);
        assert!(loaded.left_out[1].reason.contains("deeper than 32"), "{}", loaded.left_out[1].reason);
        assert!(loaded.left_out[2].reason.contains("nested too deeply"), "{}", loaded.left_out[2].reason);
        assert!(loaded.left_out[3].reason.contains("name"), "{}", loaded.left_out[3].reason);
        assert_eq!(loaded.left_out[2].record.get(), beyond_the_reader, "the record is kept as it was stored");
    }

    #[test]
    fn leaves_out_damaged_exchanges_and_bindings_too() {
        let bytes = br#"{
            "exchanges": [
                {"name": "good", "kind": "direct", "auto_delete": false, "internal": false, "arguments": {}},
                {"name": "bad", "kind": "direct", "auto_delete": "no", "internal": false, "arguments": {}}
            ],
            "queues": [],
            "bindings": [
                {"source": "good", "destination": "q", "to_exchange": false, "routing_key": "k", "arguments": {}},
                {"source": "good", "destination": "q", "to_exchange": false, "routing_key": 7, "arguments": {}}
            ],
            "policies": ["from a later version: ignored"]
        }"#;
        let loaded = read(bytes).expect("read");
        assert_eq!(loaded.definitions.exchanges.len(), 1);
        assert_eq!(loaded.definitions.bindings.len(), 1);
        let left: Vec<(EntityKind, Option<&str>)> =
            loaded.left_out.iter().map(|l| (l.kind, l.name.as_deref())).collect();
        assert_eq!(left, [(EntityKind::Exchange, Some("bad")), (EntityKind::Binding, Some("good -> q"))]);
    }

    #[test]
    fn refuses_a_file_that_is_not_a_definitions_document() {
        for bytes in [&b""[..], b"{\"queues\": [", b"not json", b"{\"queues\": {}}", b"42"] {
            assert!(read(bytes).is_err(), "{}", String::from_utf8_lossy(bytes));
        }
        assert!(read(b"{}").expect("an empty document").definitions.queues.is_empty());
    }

    #[test]
    fn saving_leaves_out_records_nested_too_deep() {
        let mut definitions = Definitions::default();
        for (name, depth) in [("ok", field_table::MAX_NESTING_DEPTH), ("too-deep", field_table::MAX_NESTING_DEPTH + 1)]
        {
            definitions.queues.push(QueueRecord {
                name: name.into(),
                auto_delete: false,
                arguments: nested(depth, false),
                homes: Vec::new(),
            });
        }
        drop_too_deep(&mut definitions);
        assert_eq!(definitions.queues.iter().map(|q| q.name.as_str()).collect::<Vec<_>>(), ["ok"]);
    }
}
