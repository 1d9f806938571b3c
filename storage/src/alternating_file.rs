//! A small state rewritten often, durably and in place: [`AlternatingFile`].
//!
//! [`crate::SnapshotFile`] replaces its file through a new temporary one, which costs an inode
//! allocation and a directory fsync per write: right for a document written now and then, too
//! dear for a state written after every applied Raft batch. Here two files take turns
//! (`NAME.0`, `NAME.1`): each write overwrites the older one in place with a sequence number,
//! the contents and their CRC-32, then fsyncs it. A crash in the middle of a write leaves that
//! file failing its CRC and the other one, the previous state, intact; a read takes the valid
//! file with the higher sequence number.

use crate::error::{IoContext, Result};
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Bytes before the contents: the sequence number (u64), the contents' length (u32) and the
/// CRC-32 of both and the contents (u32), little endian.
const HEADER_BYTES: usize = 16;

/// A state kept in two files that take turns.
#[derive(Debug)]
pub struct AlternatingFile {
    paths: [PathBuf; 2],
    /// The sequence number of the last write (0: none yet).
    last: Mutex<u64>,
}

impl AlternatingFile {
    /// The state kept at `path` (in `path.0` and `path.1`; the directory is created on the
    /// first write).
    pub fn new(path: impl AsRef<Path>) -> Self {
        let path = path.as_ref();
        let with = |n: u8| {
            let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
            name.push(format!(".{n}"));
            path.with_file_name(name)
        };
        AlternatingFile { paths: [with(0), with(1)], last: Mutex::new(0) }
    }

    /// The last state written, or `None` if there is none (or neither file is whole).
    pub fn read(&self) -> Result<Option<Vec<u8>>> {
        let mut best: Option<(u64, Vec<u8>)> = None;
        for path in &self.paths {
            let bytes = match std::fs::read(path) {
                Ok(bytes) => bytes,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error).at(path),
            };
            if let Some((sequence, contents)) = decode(&bytes) {
                if best.as_ref().is_none_or(|(b, _)| sequence > *b) {
                    best = Some((sequence, contents.to_vec()));
                }
            }
        }
        let mut last = self.last.lock();
        *last = (*last).max(best.as_ref().map_or(0, |(sequence, _)| *sequence));
        Ok(best.map(|(_, contents)| contents))
    }

    /// Replaces the state with `contents`, durably: once this returns, a read after any crash
    /// gives these contents (or a later write's).
    pub fn write(&self, contents: &[u8]) -> Result<()> {
        let mut last = self.last.lock();
        if *last == 0 {
            drop(last);
            self.read()?;
            last = self.last.lock();
        }
        let sequence = *last + 1;
        let path = &self.paths[(sequence % 2) as usize];
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).at(dir)?;
        }
        let mut file = OpenOptions::new().create(true).write(true).truncate(false).open(path).at(path)?;
        let record = encode(sequence, contents);
        file.seek(SeekFrom::Start(0)).at(path)?;
        file.write_all(&record).at(path)?;
        file.set_len(record.len() as u64).at(path)?;
        file.sync_data().at(path)?;
        if sequence <= 2 {
            // The file is new: its name must be durable too.
            sync_dir(path)?;
        }
        *last = sequence;
        Ok(())
    }
}

impl AlternatingFile {
    /// Removes both files (a state never written, or already removed, is fine).
    pub fn remove(&self) -> std::io::Result<()> {
        for path in &self.paths {
            match std::fs::remove_file(path) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
                _ => {}
            }
        }
        *self.last.lock() = 0;
        Ok(())
    }
}

fn sync_dir(path: &Path) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    File::open(dir).and_then(|d| d.sync_all()).at(dir)
}

fn encode(sequence: u64, contents: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(HEADER_BYTES + contents.len());
    record.extend_from_slice(&sequence.to_le_bytes());
    record.extend_from_slice(&(contents.len() as u32).to_le_bytes());
    let crc = checksum(&record, contents);
    record.extend_from_slice(&crc.to_le_bytes());
    record.extend_from_slice(contents);
    record
}

/// The sequence number and contents of a whole record, `None` for a torn or damaged one.
fn decode(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let header = bytes.get(..HEADER_BYTES)?;
    let sequence = u64::from_le_bytes(header[0..8].try_into().ok()?);
    let length = u32::from_le_bytes(header[8..12].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[12..16].try_into().ok()?);
    let contents = bytes.get(HEADER_BYTES..HEADER_BYTES.checked_add(length)?)?;
    (sequence > 0 && checksum(&header[..12], contents) == crc).then_some((sequence, contents))
}

fn checksum(head: &[u8], contents: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(head);
    hasher.update(contents);
    hasher.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_write_is_read_back_after_a_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub").join("applied");
        let file = AlternatingFile::new(&path);
        assert_eq!(file.read().expect("read"), None);
        for contents in [&b"one"[..], b"two, longer", b"3"] {
            file.write(contents).expect("write");
        }
        assert_eq!(file.read().expect("read").as_deref(), Some(&b"3"[..]));
        let reopened = AlternatingFile::new(&path);
        assert_eq!(reopened.read().expect("read").as_deref(), Some(&b"3"[..]));
        reopened.write(b"four").expect("write");
        assert_eq!(AlternatingFile::new(&path).read().expect("read").as_deref(), Some(&b"four"[..]));
    }

    #[test]
    fn a_torn_write_leaves_the_state_before_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("applied");
        let file = AlternatingFile::new(&path);
        file.write(b"kept").expect("write");
        file.write(b"torn by a crash").expect("write");
        let torn = dir.path().join("applied.0");
        let bytes = std::fs::read(&torn).expect("read");
        std::fs::write(&torn, &bytes[..bytes.len() - 4]).expect("tear");
        let reopened = AlternatingFile::new(&path);
        assert_eq!(reopened.read().expect("read").as_deref(), Some(&b"kept"[..]));
        reopened.write(b"after").expect("a write after a torn one goes on");
        assert_eq!(AlternatingFile::new(&path).read().expect("read").as_deref(), Some(&b"after"[..]));
    }

    #[test]
    fn writes_reuse_two_files_and_create_no_other() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = AlternatingFile::new(dir.path().join("applied"));
        for n in 0..10u8 {
            file.write(&[n; 32]).expect("write");
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("list")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["applied.0", "applied.1"]);
    }
}
