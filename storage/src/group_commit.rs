//! Group commit: the durable watermark of a log and the flush that advances it. Appends
//! only mark bytes pending and schedule the log on the [`crate::Flusher`]; the flusher
//! writes the buffer out, fsyncs once for everything pending, and publishes the new
//! watermark through a `tokio::sync::watch` that publisher confirms can await.

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::error::{Result, StorageError};

/// The durable watermark: every offset below it is on stable storage (per policy).
pub(crate) struct Durability {
    tx: watch::Sender<u64>,
    /// Set once a write or fsync failed, or the log closed; waiters stop waiting.
    terminal: Mutex<Option<Terminal>>,
}

#[derive(Clone)]
enum Terminal {
    Failed(String),
    Closed,
}

impl Durability {
    pub(crate) fn new(durable_end: u64) -> Self {
        Durability { tx: watch::Sender::new(durable_end), terminal: Mutex::new(None) }
    }

    /// Exclusive end of the durable prefix.
    pub(crate) fn current(&self) -> u64 {
        *self.tx.borrow()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }

    /// Raises the watermark only if someone watches it: under the `never` policy this
    /// runs on every append, and waking nobody should cost nothing.
    pub(crate) fn publish_if_watched(&self, end: u64) {
        if self.tx.receiver_count() > 0 {
            self.publish(end);
        }
    }

    /// Raises the watermark to `end` (never lowers it).
    pub(crate) fn publish(&self, end: u64) {
        self.tx.send_if_modified(|d| {
            let raise = end > *d;
            if raise {
                *d = end;
            }
            raise
        });
    }

    /// Lowers the watermark after a truncation.
    pub(crate) fn lower_to(&self, end: u64) {
        self.tx.send_if_modified(|d| {
            let lower = end < *d;
            if lower {
                *d = end;
            }
            lower
        });
    }

    /// Records a fatal write/fsync error and wakes every waiter.
    pub(crate) fn fail(&self, err: &StorageError) {
        self.terminal.lock().get_or_insert(Terminal::Failed(err.to_string()));
        self.tx.send_modify(|_| {});
    }

    /// Marks the log closed and wakes every waiter.
    pub(crate) fn close(&self) {
        self.terminal.lock().get_or_insert(Terminal::Closed);
        self.tx.send_modify(|_| {});
    }

    /// The error a writer or waiter should see, if the log is failed or closed.
    pub(crate) fn check(&self) -> Result<()> {
        match &*self.terminal.lock() {
            None => Ok(()),
            Some(Terminal::Failed(m)) => Err(StorageError::Failed(m.clone())),
            Some(Terminal::Closed) => Err(StorageError::Closed),
        }
    }

    /// Waits until `offset` is durable.
    pub(crate) async fn wait(&self, offset: u64) -> Result<()> {
        let mut rx = self.tx.subscribe();
        loop {
            if *rx.borrow_and_update() > offset {
                return Ok(());
            }
            self.check()?;
            if rx.changed().await.is_err() {
                return Err(StorageError::Closed);
            }
        }
    }
}
