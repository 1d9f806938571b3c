//! A virtual host on disk: its durable definitions and the directories of its queues.
//!
//! Definitions (durable exchanges, durable queues, bindings between durable things) are one
//! JSON document in a [`SnapshotFile`], rewritten atomically after every change, so a crash
//! leaves the old set or the new one. Each durable queue's messages live in a directory named
//! by the SHA-256 of the queue's name (names may hold any byte; file names may not).

use crate::queue::{LogStore, LogStoreConfig, StoreError};
use crate::stream::{Stream, StreamArguments};
use amq_protocol::types::FieldTable;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use warren_storage::SnapshotFile;

const DEFINITIONS_FILE: &str = "definitions.json";
const QUEUES_DIR: &str = "queues";
const DELAYED_DIR: &str = "delayed";

/// A durable exchange as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueueRecord {
    /// Name.
    pub name: String,
    /// Auto-delete flag.
    pub auto_delete: bool,
    /// Declared arguments.
    pub arguments: FieldTable,
}

/// A binding between durable things, as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
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
    /// The file does not hold valid definitions.
    #[error("definitions file {path} is not valid: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Where a virtual host keeps its durable state.
#[derive(Debug)]
pub struct VhostStorage {
    dir: PathBuf,
    definitions: SnapshotFile,
    /// Serialises snapshot writes so an older snapshot never overwrites a newer one.
    save_lock: Mutex<()>,
    store_config: LogStoreConfig,
}

impl VhostStorage {
    /// Storage under `dir`, with queue logs configured by `store_config`.
    pub fn new(dir: PathBuf, store_config: LogStoreConfig) -> Self {
        VhostStorage {
            definitions: SnapshotFile::new(dir.join(DEFINITIONS_FILE)),
            dir,
            save_lock: Mutex::new(()),
            store_config,
        }
    }

    /// The stored definitions (empty if none were ever saved).
    pub fn load(&self) -> Result<Definitions, DefinitionsError> {
        let Some(bytes) = self.definitions.read()? else { return Ok(Definitions::default()) };
        serde_json::from_slice(&bytes).map_err(|e| DefinitionsError::Invalid {
            path: self.definitions.path().to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Saves definitions built by `snapshot`, under the save lock.
    pub fn save(&self, snapshot: impl FnOnce() -> Definitions) -> Result<(), DefinitionsError> {
        let _guard = self.save_lock.lock();
        let bytes = serde_json::to_vec_pretty(&snapshot()).map_err(|e| DefinitionsError::Invalid {
            path: self.definitions.path().to_path_buf(),
            message: e.to_string(),
        })?;
        self.definitions.write(&bytes)?;
        Ok(())
    }

    fn store_dir(&self, kind: &str, name: &str) -> PathBuf {
        let digest = Sha256::digest(name.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(kind).join(hex)
    }

    /// Opens a durable queue's store, recovering what it holds.
    pub fn open_queue(&self, name: &str) -> Result<LogStore, StoreError> {
        LogStore::open(&self.store_dir(QUEUES_DIR, name), &self.store_config)
    }

    /// Creates a new durable queue's store, discarding anything stale in its place.
    pub fn create_queue(&self, name: &str) -> Result<LogStore, StoreError> {
        self.create_store(QUEUES_DIR, name)
    }

    /// Opens the store of a durable delayed exchange's held messages.
    pub fn open_delayed(&self, exchange: &str) -> Result<LogStore, StoreError> {
        LogStore::open(&self.store_dir(DELAYED_DIR, exchange), &self.store_config)
    }

    /// Creates the store of a new durable delayed exchange.
    pub fn create_delayed(&self, exchange: &str) -> Result<LogStore, StoreError> {
        self.create_store(DELAYED_DIR, exchange)
    }

    /// Opens a stream's log and consumer-group offsets (a stream is a queue: same directory).
    pub fn open_stream(&self, name: &str, arguments: StreamArguments) -> Result<Stream, StoreError> {
        Stream::open(&self.store_dir(QUEUES_DIR, name), &self.store_config, arguments)
    }

    /// Creates a new stream's log, discarding anything stale in its place.
    pub fn create_stream(&self, name: &str, arguments: StreamArguments) -> Result<Stream, StoreError> {
        Stream::open(&self.fresh_dir(QUEUES_DIR, name)?, &self.store_config, arguments)
    }

    fn create_store(&self, kind: &str, name: &str) -> Result<LogStore, StoreError> {
        LogStore::open(&self.fresh_dir(kind, name)?, &self.store_config)
    }

    /// The directory of a new store, emptied of anything a crash left there.
    fn fresh_dir(&self, kind: &str, name: &str) -> Result<PathBuf, StoreError> {
        let dir = self.store_dir(kind, name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| StoreError::Io(format!("{}: {e}", dir.display())))?;
        }
        Ok(dir)
    }

    /// Removes store directories that no stored queue or delayed exchange owns (left by a
    /// crash in the middle of a delete).
    pub fn remove_orphan_dirs(&self, definitions: &Definitions) {
        let delayed = definitions.exchanges.iter().filter(|e| e.kind == crate::exchange::DELAYED_TYPE);
        let keep: Vec<PathBuf> = definitions
            .queues
            .iter()
            .map(|q| self.store_dir(QUEUES_DIR, &q.name))
            .chain(delayed.map(|e| self.store_dir(DELAYED_DIR, &e.name)))
            .collect();
        for kind in [QUEUES_DIR, DELAYED_DIR] {
            let Ok(entries) = std::fs::read_dir(self.dir.join(kind)) else { continue };
            for path in entries.flatten().map(|entry| entry.path()) {
                if !keep.contains(&path) {
                    tracing::info!(dir = %path.display(), "removing the files of something that no longer exists");
                    let _ = std::fs::remove_dir_all(&path);
                }
            }
        }
    }

    /// The directory of the virtual host.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}
