//! [`LazyLogStore`]: a new durable queue's [`LogStore`], created by its first persistent
//! message rather than by its declare.
//!
//! A log store is two logs in three directories, six files and their index pages (about
//! 370 KiB on disk); most queues an application declares hold no persistent message for a
//! long time, or ever. So a declare only clears the queue's directory of anything stale (under
//! the virtual host's lifecycle lock, as before) and the files come with the first append.
//! Until then the store is empty: nothing to read, remove or sync.

use super::{Appended, LogStore, LogStoreConfig, MessageStore, StoreError};
use crate::message::Message;
use crate::message_store::log_browser::LogBrowser;
use std::path::PathBuf;
use std::sync::Arc;

/// A durable queue's store, opened on its first append.
#[derive(Debug)]
pub struct LazyLogStore {
    dir: PathBuf,
    config: LogStoreConfig,
    store: Option<LogStore>,
}

impl LazyLogStore {
    /// A store in `dir` (which holds nothing yet), with logs configured by `config`.
    pub fn new(dir: PathBuf, config: LogStoreConfig) -> Self {
        LazyLogStore { dir, config, store: None }
    }

    fn opened(&mut self) -> Result<&mut LogStore, StoreError> {
        let store = match self.store.take() {
            Some(store) => store,
            None => LogStore::open(&self.dir, &self.config)?,
        };
        Ok(self.store.insert(store))
    }
}

impl MessageStore for LazyLogStore {
    fn append(&mut self, message: &Arc<Message>) -> Result<Appended, StoreError> {
        self.opened()?.append(message)
    }

    fn read(&mut self, offset: u64) -> Result<Arc<Message>, StoreError> {
        match &mut self.store {
            Some(store) => store.read(offset),
            None => Err(StoreError::Missing(offset)),
        }
    }

    fn remove(&mut self, offsets: &[u64]) -> Result<(), StoreError> {
        match &mut self.store {
            Some(store) => store.remove(offsets),
            None => Ok(()),
        }
    }

    fn delivered(&mut self, offset: u64) {
        if let Some(store) = &mut self.store {
            store.delivered(offset);
        }
    }

    fn sync(&mut self) -> Result<(), StoreError> {
        self.store.as_mut().map_or(Ok(()), MessageStore::sync)
    }

    fn disk_bytes(&self) -> u64 {
        self.store.as_ref().map_or(0, MessageStore::disk_bytes)
    }

    fn browser(&self) -> Option<LogBrowser> {
        self.store.as_ref().and_then(MessageStore::browser)
    }

    fn close(&mut self) -> Result<(), StoreError> {
        self.store.as_mut().map_or(Ok(()), MessageStore::close)
    }

    fn destroy(self: Box<Self>) {
        match self.store {
            Some(store) => Box::new(store).destroy(),
            None => {
                if let Err(error) = std::fs::remove_dir_all(&self.dir) {
                    if error.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!(dir = %self.dir.display(), %error, "cannot remove a deleted queue's files");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::properties::Properties;
    use bytes::Bytes;

    fn message() -> Arc<Message> {
        Arc::new(Message {
            exchange: "".into(),
            routing_key: "q".into(),
            properties: Properties::default(),
            body: Bytes::from_static(b"kept"),
        })
    }

    #[test]
    fn nothing_is_on_disk_until_the_first_append_and_then_it_reads_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let queue_dir = dir.path().join("q");
        let mut store = LazyLogStore::new(queue_dir.clone(), LogStoreConfig::default());
        assert!(matches!(store.read(0), Err(StoreError::Missing(0))));
        store.remove(&[0]).expect("nothing to remove");
        store.sync().expect("nothing to sync");
        assert_eq!(store.disk_bytes(), 0);
        assert!(store.browser().is_none());
        assert!(!queue_dir.exists(), "a declare alone creates no file");
        let appended = store.append(&message()).expect("append");
        assert_eq!(appended.offset, 0);
        assert!(queue_dir.exists());
        assert_eq!(store.read(0).expect("read").body, Bytes::from_static(b"kept"));
        store.close().expect("close");
        let reopened = LogStore::open(&queue_dir, &LogStoreConfig::default()).expect("open");
        assert_eq!(reopened.unsettled_count(), 1, "the message is in the queue's log");
        Box::new(store).destroy();
        assert!(!queue_dir.exists());
    }
}
