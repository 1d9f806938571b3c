//! Group commit: the durable watermark of a log and the flush that advances it. Appends
//! only mark bytes pending and schedule the log on the [`crate::Flusher`]; the flusher
//! writes the buffer out, fsyncs once for everything pending, and publishes the new
//! watermark through a `tokio::sync::watch` that publisher confirms can await, and by
//! calling back whoever registered for an offset (no task or runtime needed: the thread
//! that raised the watermark makes the calls).

use std::collections::VecDeque;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::error::{Result, StorageError};

/// Called once the records below an offset are durable, or with the error that stopped
/// them from becoming so.
pub(crate) type DurableCallback = Box<dyn FnOnce(Result<()>) + Send>;

/// The durable watermark: every offset below it is on stable storage (per policy).
pub(crate) struct Durability {
    tx: watch::Sender<u64>,
    /// Set once a write or fsync failed, or the log closed; waiters stop waiting.
    terminal: Mutex<Option<Terminal>>,
    /// Callbacks waiting for the watermark to reach their offset, in registration order.
    /// Their offsets never decrease along the queue (a truncation clamps them all), so
    /// the due ones are always at the front. They are called under this lock, which keeps
    /// them in order.
    callbacks: Mutex<VecDeque<(u64, DurableCallback)>>,
}

#[derive(Clone)]
enum Terminal {
    Failed(String),
    Closed,
}

impl Durability {
    pub(crate) fn new(durable_end: u64) -> Self {
        Durability {
            tx: watch::Sender::new(durable_end),
            terminal: Mutex::new(None),
            callbacks: Mutex::new(VecDeque::new()),
        }
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

    /// Raises the watermark to `end` (never lowers it) and calls the callbacks now due.
    pub(crate) fn publish(&self, end: u64) {
        let raised = self.tx.send_if_modified(|d| {
            let raise = end > *d;
            if raise {
                *d = end;
            }
            raise
        });
        if raised {
            self.call_due();
        }
    }

    /// Sets the watermark to `end` after the log was cut there (truncation or restart),
    /// when every record below `end` is durable: raises or lowers it. Waiting callbacks
    /// asked for records that may be gone; they are due once `end` is.
    pub(crate) fn reset_to(&self, end: u64) {
        {
            let mut callbacks = self.callbacks.lock();
            for (offset, _) in callbacks.iter_mut() {
                *offset = (*offset).min(end);
            }
        }
        self.tx.send_if_modified(|d| {
            let changed = end != *d;
            *d = end;
            changed
        });
        self.call_due();
    }

    /// Calls `callback` once the watermark reaches `end` (at once if it has), or with the
    /// error if the log fails or closes first. It runs on the thread that raised the
    /// watermark (a flusher thread, an appender under `always`, or this caller) with an
    /// internal lock held: it must be quick and must not call into the log.
    pub(crate) fn when_durable(&self, end: u64, callback: DurableCallback) {
        let mut callbacks = self.callbacks.lock();
        if let Err(e) = self.check() {
            callback(Err(e));
            return;
        }
        // Behind any earlier callback still waiting, so that calls stay in order.
        callbacks.push_back((end, callback));
        call_due_locked(&mut callbacks, self.current());
    }

    /// Calls, in order, the callbacks whose offset the watermark has reached.
    fn call_due(&self) {
        call_due_locked(&mut self.callbacks.lock(), self.current());
    }

    /// Calls every waiting callback with the terminal error.
    fn call_all_failed(&self) {
        let mut callbacks = self.callbacks.lock();
        while let Some((_, callback)) = callbacks.pop_front() {
            let error = match self.check() {
                Err(e) => e,
                Ok(()) => StorageError::Closed,
            };
            callback(Err(error));
        }
    }

    /// Records a fatal write/fsync error and wakes every waiter.
    pub(crate) fn fail(&self, err: &StorageError) {
        self.terminal.lock().get_or_insert(Terminal::Failed(err.to_string()));
        self.tx.send_modify(|_| {});
        self.call_all_failed();
    }

    /// Marks the log closed and wakes every waiter.
    pub(crate) fn close(&self) {
        self.terminal.lock().get_or_insert(Terminal::Closed);
        self.tx.send_modify(|_| {});
        self.call_all_failed();
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

/// Calls, in order, the callbacks at the front of `callbacks` whose offset is at most
/// `durable`.
fn call_due_locked(callbacks: &mut VecDeque<(u64, DurableCallback)>, durable: u64) {
    while callbacks.front().is_some_and(|(offset, _)| *offset <= durable) {
        if let Some((_, due)) = callbacks.pop_front() {
            due(Ok(()));
        }
    }
}
