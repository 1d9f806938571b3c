//! [`ChangeJournal`]: the definition changes made since the definitions file was last
//! written, appended one record at a time.
//!
//! A record is its length (u32, little endian), the CRC-32 of its body (u32, little endian)
//! and the body, a [`DefinitionsChange`] as JSON (the definitions file's own encoding of the
//! records it holds). An append is made durable by [`ChangeJournal::sync`] before the change
//! is answered, so a record cut short or failing its CRC was never answered: reading stops
//! there, and the bytes after it are kept aside for inspection rather than lost.

use super::durable_set::DefinitionsChange;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes of a record's header: its length, then its CRC.
const HEADER_BYTES: usize = 8;
/// The longest record body read back. A record holds one definition, whose names and
/// arguments AMQP frames bound far below this; a longer length can only be damage.
const MAX_RECORD_BYTES: usize = 64 * 1024 * 1024;

/// The journal being appended to.
#[derive(Debug)]
pub struct ChangeJournal {
    path: PathBuf,
    file: Arc<File>,
    records: usize,
}

/// What reading a journal found.
#[derive(Debug, Default)]
pub struct JournalContents {
    /// The changes, in the order they were made.
    pub changes: Vec<DefinitionsChange>,
    /// Why reading stopped before the end of the file, and at which byte.
    pub damage: Option<(u64, String)>,
}

impl ChangeJournal {
    /// A new, empty journal at `path` (an existing file there is replaced).
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).write(true).truncate(true).open(path)?;
        Ok(ChangeJournal { path: path.to_path_buf(), file: Arc::new(file), records: 0 })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many records were appended to it.
    pub fn records(&self) -> usize {
        self.records
    }

    /// Appends `change` (durable once [`ChangeJournal::sync`] returns).
    pub fn append(&mut self, change: &DefinitionsChange) -> std::io::Result<()> {
        let body = serde_json::to_vec(change).map_err(std::io::Error::other)?;
        let length = u32::try_from(body.len()).map_err(std::io::Error::other)?;
        let mut record = Vec::with_capacity(HEADER_BYTES + body.len());
        record.extend_from_slice(&length.to_le_bytes());
        record.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        record.extend_from_slice(&body);
        (&*self.file).write_all(&record)?;
        self.records += 1;
        Ok(())
    }

    /// The file, to make what was appended so far durable without holding the journal.
    pub fn file(&self) -> Arc<File> {
        Arc::clone(&self.file)
    }

    /// Reads the journal at `path` (none there: no changes). A record that does not decode
    /// although its CRC holds (written by a newer release) is skipped with a warning; a torn
    /// or damaged one ends the reading.
    pub fn read(path: &Path) -> std::io::Result<JournalContents> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(JournalContents::default()),
            Err(error) => return Err(error),
        };
        let mut contents = JournalContents::default();
        let mut at = 0usize;
        while at < bytes.len() {
            match record_at(&bytes, at) {
                Ok((body, next)) => {
                    match serde_json::from_slice(body) {
                        Ok(change) => contents.changes.push(change),
                        Err(error) => tracing::warn!(
                            journal = %path.display(),
                            byte = at,
                            %error,
                            "skipping a definitions change this release cannot read"
                        ),
                    }
                    at = next;
                }
                Err(why) => {
                    contents.damage = Some((at as u64, why));
                    break;
                }
            }
        }
        Ok(contents)
    }
}

/// The body of the record at byte `at` and where the next one starts, or why there is none.
fn record_at(bytes: &[u8], at: usize) -> Result<(&[u8], usize), String> {
    let header = bytes.get(at..at + HEADER_BYTES).ok_or("a record header cut short")?;
    let length = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if length > MAX_RECORD_BYTES {
        return Err(format!("a record length of {length} bytes, more than any definition takes"));
    }
    let start = at + HEADER_BYTES;
    let body = bytes.get(start..start + length).ok_or("a record cut short")?;
    if crc32fast::hash(body) != crc {
        return Err("a record whose CRC does not match".into());
    }
    Ok((body, start + length))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn removal(name: &str) -> DefinitionsChange {
        DefinitionsChange::RemoveQueue { name: name.into() }
    }

    #[test]
    fn appended_changes_read_back_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("j");
        let mut journal = ChangeJournal::create(&path).expect("create");
        for name in ["a", "b", "c"] {
            journal.append(&removal(name)).expect("append");
        }
        journal.file().sync_data().expect("sync");
        let read = ChangeJournal::read(&path).expect("read");
        assert_eq!(read.changes, [removal("a"), removal("b"), removal("c")]);
        assert!(read.damage.is_none());
        assert_eq!(journal.records(), 3);
    }

    #[test]
    fn a_torn_or_damaged_record_ends_the_reading_with_the_records_before_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("j");
        let mut journal = ChangeJournal::create(&path).expect("create");
        journal.append(&removal("kept")).expect("append");
        journal.append(&removal("torn")).expect("append");
        let full = std::fs::read(&path).expect("read");
        std::fs::write(&path, &full[..full.len() - 3]).expect("cut");
        let read = ChangeJournal::read(&path).expect("read");
        assert_eq!(read.changes, [removal("kept")]);
        assert!(read.damage.as_ref().is_some_and(|(_, why)| why.contains("cut short")), "{:?}", read.damage);

        let mut flipped = full.clone();
        let last = flipped.len() - 2;
        flipped[last] ^= 0xff;
        std::fs::write(&path, &flipped).expect("flip");
        let read = ChangeJournal::read(&path).expect("read");
        assert_eq!(read.changes, [removal("kept")]);
        assert!(read.damage.as_ref().is_some_and(|(_, why)| why.contains("CRC")), "{:?}", read.damage);
    }

    #[test]
    fn an_absurd_length_is_damage_not_an_allocation() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("j");
        std::fs::write(&path, [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]).expect("write");
        let read = ChangeJournal::read(&path).expect("read");
        assert!(read.changes.is_empty());
        assert!(read.damage.as_ref().is_some_and(|(at, why)| *at == 0 && why.contains("length")), "{:?}", read.damage);
    }
}
