//! A virtual host on disk: its durable definitions and the directories of its queues.
//!
//! Definitions (durable exchanges, durable queues, bindings between durable things) are one
//! JSON document in a [`SnapshotFile`] (replaced atomically, so a crash leaves the old one or
//! the new one) and the journal of the changes made since it was written (`journal`): a
//! change costs one append, and the document is rewritten from the set in memory
//! (`durable_set`) only once the journal holds as many records as the set, and at every start
//! and clean stop (`recording`). Each durable queue's messages live in a directory named by the SHA-256 of
//! the queue's name (names may hold any byte; file names may not).
//!
//! A record that cannot be read back at start is left out on its own (see `reading`): the
//! record goes to an unreadable file beside the definitions and its data directory is moved
//! aside, so that one bad record neither keeps the broker down nor loses data.

use crate::message_store::{LazyLogStore, LogStore, LogStoreConfig, StoreError};
use amq_protocol::types::FieldTable;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use warren_storage::{LogConfig, SnapshotFile};

mod durable_set;
mod journal;
mod reading;
mod recording;

pub use durable_set::{DefinitionsChange, DurableSet};
pub use reading::{binding_name, EntityKind, LeftOut, LoadedDefinitions};
pub use recording::PendingChange;

use journal::ChangeJournal;
use recording::Recorded;

const DEFINITIONS_FILE: &str = "definitions.json";
const QUEUES_DIR: &str = "queues";
const DELAYED_DIR: &str = "delayed";
/// Where the data of definitions that could not be read is kept, under the vhost directory.
const UNREADABLE_DIR: &str = "unreadable";
/// Where queues page transient messages (nothing there outlives the broker).
const PAGING_DIR: &str = "paging";
/// Segment size of a quorum queue's Raft log (see [`VhostStorage::quorum_queue`]).
const QUORUM_SEGMENT_BYTES: u64 = 8 * 1024 * 1024;
/// Log bytes between two sparse-index entries of a quorum queue's Raft log.
const QUORUM_INDEX_INTERVAL_BYTES: u32 = 64 * 1024;

/// A durable exchange as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExchangeRecord {
    /// Name.
    pub name: String,
    /// Type name (direct, fanout, topic, headers).
    pub kind: String,
    /// Auto-delete flag.
    pub auto_delete: bool,
    /// Internal flag.
    pub internal: bool,
    /// Declared arguments.
    pub arguments: FieldTable,
}

/// A durable queue as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueRecord {
    /// Name.
    pub name: String,
    /// Auto-delete flag.
    pub auto_delete: bool,
    /// Declared arguments.
    pub arguments: FieldTable,
    /// In a cluster, the nodes (by Raft id) the queue lives on when it does not live on this
    /// one: this node keeps only a stand-in that forwards to them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub homes: Vec<u64>,
}

/// A binding between durable things, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BindingRecord {
    /// Source exchange.
    pub source: String,
    /// Destination name.
    pub destination: String,
    /// Whether the destination is an exchange (else a queue).
    pub to_exchange: bool,
    /// Binding key.
    pub routing_key: String,
    /// Binding arguments.
    pub arguments: FieldTable,
}

/// Everything a virtual host must have again after a restart.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Definitions {
    /// Durable exchanges (not the built-in ones).
    pub exchanges: Vec<ExchangeRecord>,
    /// Durable queues (not exclusive ones).
    pub queues: Vec<QueueRecord>,
    /// Bindings whose both ends are durable.
    pub bindings: Vec<BindingRecord>,
}

/// Why definitions could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum DefinitionsError {
    /// The file could not be read or written.
    #[error(transparent)]
    Storage(#[from] warren_storage::StorageError),
    /// The file is not a definitions document at all (a record that cannot be read is left
    /// out on its own instead).
    #[error(
        "definitions file {path} cannot be read: {message}. The broker does not start with it. To start this \
         virtual host without its durable exchanges, queues and bindings, move the file aside (keep it to repair \
         or inspect): the data directories of its queues are then kept, moved under {unreadable_dir}"
    )]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Where the data directories go if the file is moved aside.
        unreadable_dir: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Definitions could not be turned into JSON.
    #[error("cannot write definitions to {path}: {message}")]
    Encode {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The journal of changes could not be written or read.
    #[error("cannot use the definitions journal {path}: {source}")]
    Journal {
        /// The journal.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A data directory could not be moved out of harm's way.
    #[error("cannot move {from} to {to}: {source}")]
    SetAside {
        /// The directory.
        from: PathBuf,
        /// Where it was to go.
        to: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Where a virtual host keeps its durable state.
#[derive(Debug)]
pub struct VhostStorage {
    dir: PathBuf,
    definitions: SnapshotFile,
    /// The durable set and its journal, once the virtual host has restored what was stored
    /// ([`VhostStorage::start_recording`]); changes are applied and appended in one order.
    recorded: Mutex<Option<Recorded>>,
    store_config: LogStoreConfig,
    /// Whether the catalog's Raft log records every change first ([`VhostStorage::owned_by_catalog`]).
    catalog_owned: bool,
}

impl VhostStorage {
    /// Storage under `dir`, with queue logs configured by `store_config`.
    pub fn new(dir: PathBuf, store_config: LogStoreConfig) -> Self {
        VhostStorage {
            definitions: SnapshotFile::new(dir.join(DEFINITIONS_FILE)),
            dir,
            recorded: Mutex::new(None),
            store_config,
            catalog_owned: false,
        }
    }

    /// This storage, with its changes recorded first in the catalog's Raft log, which is
    /// synced before a change is made: the journal is then a copy the catalog replays its log
    /// onto after a crash. So appends are not synced one by one (the catalog syncs them at its
    /// checkpoints: [`VhostStorage::sync`]), and directories that no definition owns at start
    /// are kept until the replay is done ([`VhostStorage::remove_orphans`]): a queue declared
    /// just before a crash may be in the log and not yet in the journal, with its messages in
    /// its directory.
    pub fn owned_by_catalog(mut self) -> Self {
        self.catalog_owned = true;
        self
    }

    /// The stored definitions as far as they can be read (empty if none were ever saved):
    /// the definitions file with the changes of its journal applied. A record that cannot be
    /// read, or whose field tables nest deeper than the protocol accepts, is left out on its
    /// own; only a file that is not a definitions document at all is an error. Nothing on
    /// disk changes here: see [`VhostStorage::prepare_dirs`] and
    /// [`VhostStorage::start_recording`].
    pub fn load(&self) -> Result<LoadedDefinitions, DefinitionsError> {
        let mut loaded = match self.definitions.read()? {
            Some(bytes) => reading::read(&bytes).map_err(|message| DefinitionsError::Invalid {
                path: self.definitions.path().to_path_buf(),
                unreadable_dir: self.dir.join(UNREADABLE_DIR),
                message,
            })?,
            None => LoadedDefinitions::default(),
        };
        let path = self.journal_path(loaded.generation);
        let contents = ChangeJournal::read(&path).map_err(|source| DefinitionsError::Journal { path, source })?;
        if !contents.changes.is_empty() {
            let mut set = DurableSet::of(std::mem::take(&mut loaded.definitions));
            for change in contents.changes {
                set.apply(change);
            }
            loaded.definitions = set.definitions();
            loaded.found = true;
        }
        loaded.journal_damage = contents.damage;
        Ok(loaded)
    }

    fn store_dir(&self, kind: &str, name: &str) -> PathBuf {
        let digest = Sha256::digest(name.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(kind).join(hex)
    }

    /// Opens a durable queue's store, recovering what it holds; `None` if the queue never
    /// held a persistent message (its store was never created: see [`LazyLogStore`]).
    pub fn open_queue(&self, name: &str) -> Result<Option<LogStore>, StoreError> {
        let dir = self.store_dir(QUEUES_DIR, name);
        if !dir.exists() {
            return Ok(None);
        }
        LogStore::open(&dir, &self.store_config).map(Some)
    }

    /// A new durable queue's store, discarding anything stale in its place; its files are
    /// created by its first persistent message.
    pub fn create_queue(&self, name: &str) -> Result<LazyLogStore, StoreError> {
        Ok(LazyLogStore::new(self.fresh_dir(QUEUES_DIR, name)?, self.store_config.clone()))
    }

    /// Where queue `name` pages its transient messages.
    pub fn page_file(&self, name: &str) -> crate::message_store::PageFile {
        crate::message_store::PageFile { dir: self.store_dir(PAGING_DIR, name), config: self.store_config.clone() }
    }

    /// Opens the store of a durable delayed exchange's held messages.
    pub fn open_delayed(&self, exchange: &str) -> Result<LogStore, StoreError> {
        LogStore::open(&self.store_dir(DELAYED_DIR, exchange), &self.store_config)
    }

    /// Creates the store of a new durable delayed exchange.
    pub fn create_delayed(&self, exchange: &str) -> Result<LogStore, StoreError> {
        self.create_store(DELAYED_DIR, exchange)
    }

    /// The directory of a delayed exchange's held messages (or of its replicated group).
    pub fn delayed_dir(&self, exchange: &str) -> PathBuf {
        self.store_dir(DELAYED_DIR, exchange)
    }

    /// The directory of a new replicated delayed exchange's group, emptied of anything stale.
    pub fn create_delayed_dir(&self, exchange: &str) -> Result<PathBuf, StoreError> {
        self.fresh_dir(DELAYED_DIR, exchange)
    }

    /// The directory of a stream (a stream is a queue: same directory).
    pub fn stream_dir(&self, name: &str) -> PathBuf {
        self.store_dir(QUEUES_DIR, name)
    }

    /// The directory of a new replicated stream, emptied of anything stale.
    pub fn create_stream_dir(&self, name: &str) -> Result<PathBuf, StoreError> {
        self.fresh_dir(QUEUES_DIR, name)
    }

    /// How queue logs are configured.
    pub fn store_config(&self) -> &LogStoreConfig {
        &self.store_config
    }

    /// The Raft log of a replicated stream: as the broker's queue logs (its entries are
    /// publishes, as large as the stream's), purged behind the group's snapshots.
    pub fn replicated_log_config(&self) -> LogConfig {
        self.store_config.log_config()
    }

    /// The directory of a quorum queue's Raft group (a quorum queue is a queue: same
    /// directory), and how its log is configured.
    pub fn quorum_queue(&self, name: &str) -> (PathBuf, LogConfig) {
        (self.store_dir(QUEUES_DIR, name), self.quorum_log_config())
    }

    /// A quorum queue's Raft log: smaller segments than a classic queue's. Each segment maps
    /// index files sized for the whole segment, and a thousand idle quorum queues each keep
    /// one; smaller segments also let the log be purged sooner behind the release cursor.
    /// Entries are batches read mostly in order, so a sparser index costs little: one page
    /// of index per segment instead of four (a thousand idle queues: 24 MB less RSS).
    fn quorum_log_config(&self) -> LogConfig {
        let mut config = self.store_config.log_config();
        config.segment_bytes = config.segment_bytes.min(QUORUM_SEGMENT_BYTES);
        config.index_interval_bytes = QUORUM_INDEX_INTERVAL_BYTES;
        config.write_buffer_bytes = 8 * 1024;
        config
    }

    /// Like [`VhostStorage::quorum_queue`], for a new queue: the directory is emptied of
    /// anything stale in its place.
    pub fn create_quorum_queue(&self, name: &str) -> Result<(PathBuf, LogConfig), StoreError> {
        Ok((self.fresh_dir(QUEUES_DIR, name)?, self.quorum_log_config()))
    }

    fn create_store(&self, kind: &str, name: &str) -> Result<LogStore, StoreError> {
        LogStore::open(&self.fresh_dir(kind, name)?, &self.store_config)
    }

    /// The directory of a new store, emptied of anything a crash left there. (The data of a
    /// definition left out at start is not there: [`VhostStorage::prepare_dirs`] moved it.)
    fn fresh_dir(&self, kind: &str, name: &str) -> Result<PathBuf, StoreError> {
        let dir = self.store_dir(kind, name);
        if dir.exists() {
            tracing::warn!(dir = %dir.display(), "removing stale files in the place of a new {kind} store");
            std::fs::remove_dir_all(&dir).map_err(|e| StoreError::file(&dir, e))?;
        }
        Ok(dir)
    }

    /// Puts the store directories in order before `kept`, the records about to be restored,
    /// is restored; `left_out` are the records that cannot be, and `found` says whether there
    /// was a definitions file. Returns the unreadable file, if one was written.
    ///
    /// - Left-out records are written, as stored and with their reasons, to
    ///   `definitions.unreadable-<unix ms>.json` beside the definitions, and each one's data
    ///   directory is moved to `unreadable/<unix ms>/` (same relative path), out of reach of
    ///   orphan removal and of a new declare of the same name; both are logged.
    /// - A directory that no kept record owns was left by a crash in the middle of a delete
    ///   and is removed, except when it may belong to something unknown: when a left-out
    ///   record's name cannot be read, or when there is no definitions file while data
    ///   directories exist (the file was moved aside). Those directories are moved aside too.
    pub fn prepare_dirs(
        &self,
        kept: &Definitions,
        left_out: &mut [LeftOut],
        found: bool,
    ) -> Result<Option<PathBuf>, DefinitionsError> {
        // Paged transient messages do not survive a restart, as transient messages do not.
        let paging = self.dir.join(PAGING_DIR);
        if paging.exists() {
            if let Err(error) = std::fs::remove_dir_all(&paging) {
                tracing::warn!(dir = %paging.display(), %error, "cannot remove the pages of the last run");
            }
        }
        let delayed = kept.exchanges.iter().filter(|e| e.kind == crate::exchange::DELAYED_TYPE);
        let queues = kept.queues.iter().map(|q| q.name.as_str());
        let mut orphans = self.orphans(queues, delayed.map(|e| e.name.as_str()));
        let (stamp, file) = self.unused_stamp();
        let aside = self.dir.join(UNREADABLE_DIR).join(stamp.to_string());
        let aside_of = |path: &Path| aside.join(path.strip_prefix(&self.dir).unwrap_or(path));
        let mut moves: Vec<(PathBuf, PathBuf)> = Vec::new();
        // Which kinds of directory may hold the data of something unknown.
        let mut unknown_owner = if found { Vec::new() } else { vec![QUEUES_DIR, DELAYED_DIR] };
        for entry in left_out.iter_mut() {
            let kind = match entry.kind {
                EntityKind::Queue => QUEUES_DIR,
                EntityKind::Exchange => DELAYED_DIR,
                EntityKind::Binding => continue,
            };
            let Some(name) = &entry.name else {
                unknown_owner.push(kind);
                if orphans.iter().any(|(k, _)| *k == kind) {
                    entry.data_moved_to = Some(aside.join(kind));
                }
                continue;
            };
            let dir = self.store_dir(kind, name);
            if let Some(at) = orphans.iter().position(|(_, path)| *path == dir) {
                orphans.swap_remove(at);
                let to = aside_of(&dir);
                entry.data_moved_from = Some(dir.clone());
                entry.data_moved_to = Some(to.clone());
                moves.push((dir, to));
            }
        }
        let mut removals = Vec::new();
        if self.catalog_owned {
            // Not yet: the catalog's replay may declare their owners (remove_orphans, after).
            orphans.clear();
        }
        for (kind, path) in orphans {
            if unknown_owner.contains(&kind) {
                let to = aside_of(&path);
                tracing::warn!(
                    dir = %path.display(),
                    moved_to = %to.display(),
                    "keeping data that no readable definition owns: moved aside instead of removed"
                );
                moves.push((path, to));
            } else {
                removals.push(path);
            }
        }
        let written = if left_out.is_empty() {
            None
        } else {
            self.write_unreadable(&file, left_out)?;
            Some(file)
        };
        for (from, to) in &moves {
            move_aside(from, to)?;
        }
        for path in removals {
            tracing::info!(dir = %path.display(), "removing the files of something that no longer exists");
            let _ = std::fs::remove_dir_all(&path);
        }
        let shown_path = |path: Option<&Path>| path.map(|p| p.display().to_string()).unwrap_or_default();
        for entry in left_out.iter() {
            let name = entry.name.as_deref().map_or("(unreadable)".into(), reading::shown);
            tracing::error!(
                kind = entry.kind.as_str(),
                %name,
                reason = %reading::shown(&entry.reason),
                data_moved_to = %shown_path(entry.data_moved_to.as_deref()),
                unreadable_file = %shown_path(written.as_deref()),
                "a stored definition cannot be read: left out of the virtual host, kept in the unreadable file"
            );
        }
        Ok(written)
    }

    /// The data directories that none of `queues` and delayed exchanges `delayed` owns.
    fn orphans<'a>(
        &self,
        queues: impl Iterator<Item = &'a str>,
        delayed: impl Iterator<Item = &'a str>,
    ) -> Vec<(&'static str, PathBuf)> {
        let owned: HashSet<PathBuf> = queues
            .map(|name| self.store_dir(QUEUES_DIR, name))
            .chain(delayed.map(|name| self.store_dir(DELAYED_DIR, name)))
            .collect();
        let mut orphans = Vec::new();
        for kind in [QUEUES_DIR, DELAYED_DIR] {
            let Ok(entries) = std::fs::read_dir(self.dir.join(kind)) else { continue };
            orphans.extend(entries.flatten().map(|entry| (kind, entry.path())).filter(|(_, p)| !owned.contains(p)));
        }
        orphans
    }

    /// Removes the data directories that none of `queues` and delayed exchanges `delayed`
    /// owns: what a catalog-owned storage kept at start ([`VhostStorage::owned_by_catalog`]),
    /// once the catalog's replay is done.
    pub fn remove_orphans<'a>(&self, queues: impl Iterator<Item = &'a str>, delayed: impl Iterator<Item = &'a str>) {
        for (_, path) in self.orphans(queues, delayed) {
            tracing::info!(dir = %path.display(), "removing the files of something that no longer exists");
            if let Err(error) = std::fs::remove_dir_all(&path) {
                tracing::warn!(dir = %path.display(), %error, "cannot remove the files of something that no longer exists");
            }
        }
    }

    /// Whether queue `name` has a data directory here.
    pub fn holds_queue(&self, name: &str) -> bool {
        self.store_dir(QUEUES_DIR, name).exists()
    }

    /// A time stamp (unix ms) for which neither an unreadable file nor folder exists yet.
    fn unused_stamp(&self) -> (u128, PathBuf) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or_default();
        (now..)
            .map(|stamp| (stamp, self.dir.join(format!("definitions.unreadable-{stamp}.json"))))
            .find(|(stamp, file)| !file.exists() && !self.dir.join(UNREADABLE_DIR).join(stamp.to_string()).exists())
            .unwrap_or((now, self.dir.join(format!("definitions.unreadable-{now}.json"))))
    }

    fn write_unreadable(&self, file: &Path, left_out: &[LeftOut]) -> Result<(), DefinitionsError> {
        #[derive(Serialize)]
        struct Unreadable<'a> {
            definitions: &'a Path,
            note: &'static str,
            left_out: &'a [LeftOut],
        }
        let note = "These stored definitions could not be read when the virtual host started, and were left out of \
                    it (the definitions file no longer holds them). To bring one back: stop the broker, repair its \
                    record and add it to the definitions file, and move its data directory (if any) from \
                    data_moved_to back to data_moved_from.";
        let document = Unreadable { definitions: self.definitions.path(), note, left_out };
        let bytes = serde_json::to_vec_pretty(&document)
            .map_err(|e| DefinitionsError::Encode { path: file.to_path_buf(), message: e.to_string() })?;
        SnapshotFile::new(file).write(&bytes)?;
        Ok(())
    }

    /// The directory of the virtual host.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Moves a data directory to `to` (creating its parents) and makes the move durable.
fn move_aside(from: &Path, to: &Path) -> Result<(), DefinitionsError> {
    let fail = |source| DefinitionsError::SetAside { from: from.to_path_buf(), to: to.to_path_buf(), source };
    let parent = to.parent().unwrap_or(to);
    std::fs::create_dir_all(parent).map_err(fail)?;
    std::fs::rename(from, to).map_err(fail)?;
    for dir in [parent, from.parent().unwrap_or(from)] {
        if let Err(error) = std::fs::File::open(dir).and_then(|d| d.sync_all()) {
            tracing::warn!(dir = %dir.display(), %error, "cannot fsync a directory after moving data aside");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field_table::{tests::nested, MAX_NESTING_DEPTH};

    fn storage(dir: &Path) -> VhostStorage {
        VhostStorage::new(dir.to_path_buf(), LogStoreConfig::default())
    }

    /// A queue's data directory with one file in it.
    fn data_dir(storage: &VhostStorage, name: &str) -> PathBuf {
        let dir = storage.store_dir(QUEUES_DIR, name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("00000000000000000000.log"), name).expect("write");
        dir
    }

    fn queue(name: &str, depth: usize) -> QueueRecord {
        QueueRecord { name: name.into(), auto_delete: false, arguments: nested(depth, false), homes: Vec::new() }
    }

    /// Writes a definitions file holding `queues`, each given as JSON text.
    fn write_definitions(storage: &VhostStorage, queues: &[String]) {
        let text = format!(r#"{{"exchanges":[],"queues":[{}],"bindings":[]}}"#, queues.join(","));
        std::fs::write(storage.definitions.path(), text).expect("write definitions");
    }

    fn json(record: &QueueRecord) -> String {
        serde_json::to_string(record).expect("json")
    }

    fn names(definitions: &Definitions) -> Vec<&str> {
        definitions.queues.iter().map(|q| q.name.as_str()).collect()
    }

    #[test]
    fn what_is_saved_up_to_the_limit_loads_back_and_deeper_records_are_not_saved() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = storage(dir.path());
        let definitions = Definitions {
            queues: vec![queue("deepest", MAX_NESTING_DEPTH), queue("too-deep", MAX_NESTING_DEPTH + 1)],
            ..Definitions::default()
        };
        storage.start_recording(&definitions, 0, None).expect("save");
        let loaded = storage.load().expect("load");
        assert_eq!(names(&loaded.definitions), ["deepest"]);
        assert!(loaded.left_out.is_empty() && loaded.found);
        assert_eq!(loaded.definitions.queues[0].arguments, nested(MAX_NESTING_DEPTH, false));
    }

    #[test]
    fn a_damaged_record_is_left_out_and_its_data_moved_aside_with_the_record_beside_the_definitions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = storage(dir.path());
        let healthy_dir = data_dir(&storage, "healthy");
        let bad_dir = data_dir(&storage, "bad");
        let deleted_dir = data_dir(&storage, "deleted");
        let mut bad = serde_json::to_value(queue("bad", 1)).expect("json");
        bad["arguments"]["k"] = serde_json::json!({"NoSuchType": 1});
        write_definitions(&storage, &[json(&queue("healthy", 2)), bad.to_string()]);

        let mut loaded = storage.load().expect("a partly damaged file loads");
        assert_eq!(names(&loaded.definitions), ["healthy"]);
        assert_eq!(loaded.left_out.len(), 1);
        assert_eq!(loaded.left_out[0].name.as_deref(), Some("bad"));
        let file = storage
            .prepare_dirs(&loaded.definitions, &mut loaded.left_out, loaded.found)
            .expect("prepare")
            .expect("an unreadable file");

        assert!(healthy_dir.join("00000000000000000000.log").exists(), "a kept queue's data stays in place");
        assert!(!deleted_dir.exists(), "what no record owns is still removed");
        assert!(!bad_dir.exists(), "the left-out queue's data is moved out of reach of a new declare");
        let moved = loaded.left_out[0].data_moved_to.clone().expect("moved");
        assert!(moved.starts_with(dir.path().join(UNREADABLE_DIR)), "{}", moved.display());
        assert_eq!(std::fs::read(moved.join("00000000000000000000.log")).expect("moved data"), b"bad");

        assert_eq!(file.parent(), Some(dir.path()));
        let name = file.file_name().and_then(|n| n.to_str()).expect("name");
        assert!(name.starts_with("definitions.unreadable-") && name.ends_with(".json"), "{name}");
        let unreadable: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&file).expect("read")).expect("the unreadable file is JSON");
        let entry = &unreadable["left_out"][0];
        assert_eq!(entry["kind"], "queue");
        assert_eq!(entry["name"], "bad");
        assert_eq!(entry["record"], bad, "the record as it was stored");
        assert!(entry["reason"].as_str().is_some_and(|r| r.contains("NoSuchType")), "{entry}");
        assert_eq!(entry["data_moved_from"], bad_dir.display().to_string());
        assert_eq!(entry["data_moved_to"], moved.display().to_string());
    }

    #[test]
    fn records_too_deep_for_the_reader_or_the_limit_are_left_out_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = storage(dir.path());
        let mut deep = r#"{"LongString":[108]}"#.to_string();
        for _ in 1..70 {
            deep = format!(r#"{{"FieldTable":{{"k":{deep}}}}}"#);
        }
        let seventy = format!(r#"{{"name":"seventy","auto_delete":false,"arguments":{{"k":{deep}}}}}"#);
        write_definitions(&storage, &[seventy, json(&queue("forty", 40)), json(&queue("ok", MAX_NESTING_DEPTH))]);
        let loaded = storage.load().expect("load");
        assert_eq!(names(&loaded.definitions), ["ok"]);
        let left: Vec<_> = loaded.left_out.iter().map(|l| l.name.as_deref()).collect();
        assert_eq!(left, [Some("seventy"), Some("forty")]);
    }

    #[test]
    fn when_a_record_has_no_readable_name_no_unowned_data_is_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = storage(dir.path());
        let unknown_dir = data_dir(&storage, "whose?");
        write_definitions(&storage, &[r#"{"name":7,"auto_delete":false,"arguments":{}}"#.to_string()]);
        let mut loaded = storage.load().expect("load");
        assert_eq!(loaded.left_out.len(), 1);
        assert_eq!(loaded.left_out[0].name, None);
        storage.prepare_dirs(&loaded.definitions, &mut loaded.left_out, loaded.found).expect("prepare");
        assert!(!unknown_dir.exists());
        let folder = loaded.left_out[0].data_moved_to.clone().expect("where unowned data went");
        let moved = folder.join(unknown_dir.file_name().expect("name"));
        assert!(moved.join("00000000000000000000.log").exists(), "{}", moved.display());
    }

    #[test]
    fn a_file_that_is_not_json_stops_the_start_with_what_to_do_and_touches_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = storage(dir.path());
        let queue_dir = data_dir(&storage, "q");
        std::fs::write(storage.definitions.path(), b"{\"queues\": [ garbage").expect("write");
        let error = storage.load().expect_err("not a definitions document").to_string();
        assert!(error.contains(&storage.definitions.path().display().to_string()), "{error}");
        assert!(error.contains("move the file aside"), "{error}");
        assert!(queue_dir.exists());
        assert!(!dir.path().join(UNREADABLE_DIR).exists());
    }

    #[test]
    fn without_a_definitions_file_existing_data_is_moved_aside_not_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = storage(dir.path());
        let queue_dir = data_dir(&storage, "q");
        let mut loaded = storage.load().expect("load");
        assert!(!loaded.found);
        let file = storage.prepare_dirs(&loaded.definitions, &mut loaded.left_out, loaded.found).expect("prepare");
        assert_eq!(file, None, "nothing was left out, so there is no unreadable file");
        assert!(!queue_dir.exists());
        let aside = std::fs::read_dir(dir.path().join(UNREADABLE_DIR)).expect("unreadable folder").count();
        assert_eq!(aside, 1);
    }

    #[test]
    fn a_healthy_start_removes_only_unowned_data_and_writes_nothing_aside() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = storage(dir.path());
        let kept_dir = data_dir(&storage, "kept");
        let orphan_dir = data_dir(&storage, "orphan");
        let definitions = Definitions { queues: vec![queue("kept", 1)], ..Definitions::default() };
        storage.start_recording(&definitions, 0, None).expect("save");
        let mut loaded = storage.load().expect("load");
        assert_eq!(
            storage.prepare_dirs(&loaded.definitions, &mut loaded.left_out, loaded.found).expect("prepare"),
            None
        );
        assert!(kept_dir.exists() && !orphan_dir.exists());
        assert!(!dir.path().join(UNREADABLE_DIR).exists());
    }
}
