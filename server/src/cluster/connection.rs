//! One authenticated connection to a peer: a writer draining the peer's outgoing queue (plus
//! heartbeats) and a reader dispatching what arrives, run together until either ends.
//!
//! Outgoing data is bounded per connection: every queued frame holds permits of a byte budget
//! ([`TransportSettings::max_buffered_bytes_per_peer`]) until it is handed to the socket, so a
//! sender waits (within its timeout) when the peer does not keep up. Requests waiting for a
//! response are kept here, by id, and fail when the connection ends.

use super::envelope::{Envelope, RequestId};
use super::frame::{self, FramedStream};
use super::inbox::{Incoming, IncomingRequest, Responder};
use super::transport::{stopped, TransportError, TransportSettings, Wire};
use bytes::Bytes;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};

/// A frame waiting to be written, holding its share of the byte budget.
pub(crate) struct OutFrame {
    bytes: Bytes,
    _budget: OwnedSemaphorePermit,
}

/// Queues frames on one connection, within its byte budget.
#[derive(Debug, Clone)]
pub(crate) struct LinkSender {
    peer: Arc<str>,
    queue: mpsc::UnboundedSender<OutFrame>,
    budget: Arc<Semaphore>,
}

impl std::fmt::Debug for OutFrame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OutFrame({} bytes)", self.bytes.len())
    }
}

impl LinkSender {
    /// Queues `bytes`, waiting for room in the budget; fails if the connection is gone.
    pub(crate) async fn send_frame(&self, bytes: Bytes) -> Result<(), TransportError> {
        let disconnected = || TransportError::Disconnected(self.peer.to_string());
        let permits = u32::try_from(bytes.len().max(1)).map_err(|_| disconnected())?;
        let budget = Arc::clone(&self.budget).acquire_many_owned(permits).await.map_err(|_| disconnected())?;
        self.queue.send(OutFrame { bytes, _budget: budget }).map_err(|_| disconnected())
    }
}

/// Senders of requests that wait for a response, by request id.
type Pending<S> = Arc<Mutex<HashMap<RequestId, oneshot::Sender<S>>>>;

/// The live connection to a peer, as the transport keeps it.
#[derive(Debug)]
pub(crate) struct Link<S> {
    /// Tells this connection from a later one to the same peer.
    pub(crate) serial: u64,
    sender: LinkSender,
    pending: Pending<S>,
    /// Ends the connection (when a newer one replaces it).
    closer: Arc<Notify>,
}

impl<S> Clone for Link<S> {
    fn clone(&self) -> Self {
        Link {
            serial: self.serial,
            sender: self.sender.clone(),
            pending: Arc::clone(&self.pending),
            closer: Arc::clone(&self.closer),
        }
    }
}

/// The parts of a connection only its task holds.
pub(crate) struct LinkTask {
    queue: mpsc::UnboundedReceiver<OutFrame>,
}

impl<S: Wire> Link<S> {
    /// A link to `peer` with a budget of `max_buffered_bytes` of queued frames.
    pub(crate) fn new(peer: &str, serial: u64, max_buffered_bytes: usize) -> (Self, LinkTask) {
        let (queue, receiver) = mpsc::unbounded_channel();
        let sender = LinkSender { peer: Arc::from(peer), queue, budget: Arc::new(Semaphore::new(max_buffered_bytes)) };
        let link = Link { serial, sender, pending: Arc::default(), closer: Arc::new(Notify::new()) };
        (link, LinkTask { queue: receiver })
    }

    /// Sends a request frame (already encoded with `id`) and waits for the response.
    pub(crate) async fn call(&self, id: RequestId, frame: Bytes, timeout: Duration) -> Result<S, TransportError> {
        let (respond, response) = oneshot::channel();
        lock(&self.pending).insert(id, respond);
        let exchange = async {
            self.sender.send_frame(frame).await?;
            response.await.map_err(|_| TransportError::Disconnected(self.sender.peer.to_string()))
        };
        let result = tokio::time::timeout(timeout, exchange).await;
        let result =
            result.unwrap_or_else(|_| Err(TransportError::Timeout { peer: self.sender.peer.to_string(), timeout }));
        if result.is_err() {
            lock(&self.pending).remove(&id);
        }
        result
    }

    /// Queues a frame without waiting for an answer.
    pub(crate) async fn send(&self, frame: Bytes) -> Result<(), TransportError> {
        self.sender.send_frame(frame).await
    }

    /// Asks the connection's task to end.
    pub(crate) fn close(&self) {
        self.closer.notify_one();
    }

    /// Fails every request still waiting and every sender waiting for budget.
    fn fail_waiters(&self) {
        self.sender.budget.close();
        lock(&self.pending).clear();
    }
}

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CloseReason {
    #[error("closed by the peer")]
    PeerClosed,
    #[error("nothing received for {0:?}")]
    Idle(Duration),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol error: {0}")]
    Protocol(#[from] frame::FrameError),
    #[error("replaced by a newer connection")]
    Replaced,
    #[error("this node is shutting down")]
    Shutdown,
}

/// Runs the connection until it ends; then fails what waits on it.
pub(crate) async fn serve<Q: Wire, S: Wire>(
    framed: FramedStream,
    link: Link<S>,
    task: LinkTask,
    inbox: mpsc::Sender<Incoming<Q, S>>,
    settings: &TransportSettings,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> CloseReason {
    let (sink, stream) = framed.split();
    let reason = tokio::select! {
        reason = write_loop(sink, task.queue, settings.heartbeat_interval) => reason,
        reason = read_loop(stream, &link, inbox, settings.idle_timeout) => reason,
        () = link.closer.notified() => CloseReason::Replaced,
        () = stopped(shutdown) => CloseReason::Shutdown,
    };
    link.fail_waiters();
    reason
}

async fn write_loop(
    mut sink: SplitSink<FramedStream, Bytes>,
    mut queue: mpsc::UnboundedReceiver<OutFrame>,
    heartbeat_interval: Duration,
) -> CloseReason {
    let heartbeat = match frame::encode(&Envelope::<(), ()>::Heartbeat, frame::MAX_FRAME_BYTES) {
        Ok(bytes) => bytes,
        Err(error) => return CloseReason::Protocol(error),
    };
    let mut ticker = tokio::time::interval(heartbeat_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let result = tokio::select! {
            frame = queue.recv() => match frame {
                Some(frame) => write_batch(&mut sink, &mut queue, frame).await,
                None => return CloseReason::Shutdown,
            },
            _ = ticker.tick() => sink.send(heartbeat.clone()).await,
        };
        if let Err(error) = result {
            return CloseReason::Io(error);
        }
    }
}

/// Writes `first` and whatever else is queued, then flushes once.
async fn write_batch(
    sink: &mut SplitSink<FramedStream, Bytes>,
    queue: &mut mpsc::UnboundedReceiver<OutFrame>,
    first: OutFrame,
) -> std::io::Result<()> {
    sink.feed(first.bytes).await?;
    while let Ok(next) = queue.try_recv() {
        sink.feed(next.bytes).await?;
    }
    sink.flush().await
}

async fn read_loop<Q: Wire, S: Wire>(
    mut stream: SplitStream<FramedStream>,
    link: &Link<S>,
    inbox: mpsc::Sender<Incoming<Q, S>>,
    idle_timeout: Duration,
) -> CloseReason {
    loop {
        let frame = match tokio::time::timeout(idle_timeout, stream.next()).await {
            Err(_) => return CloseReason::Idle(idle_timeout),
            Ok(None) => return CloseReason::PeerClosed,
            Ok(Some(Err(error))) => return CloseReason::Io(error),
            Ok(Some(Ok(frame))) => frame,
        };
        let envelope = match frame::decode::<Envelope<Q, S>>(&frame) {
            Ok(envelope) => envelope,
            Err(error) => return CloseReason::Protocol(error),
        };
        if dispatch(envelope, link, &inbox).await.is_err() {
            return CloseReason::Shutdown;
        }
    }
}

/// Hands an arrived envelope to its destination; fails only if the inbox is gone.
async fn dispatch<Q: Wire, S: Wire>(
    envelope: Envelope<Q, S>,
    link: &Link<S>,
    inbox: &mpsc::Sender<Incoming<Q, S>>,
) -> Result<(), ()> {
    let from = || link.sender.peer.to_string();
    let incoming = match envelope {
        Envelope::Heartbeat => return Ok(()),
        Envelope::Response { id, body } => {
            // A response to a request that timed out is dropped here.
            if let Some(waiter) = lock(&link.pending).remove(&id) {
                let _ = waiter.send(body);
            }
            return Ok(());
        }
        Envelope::OneWay { body } => Incoming::Message { from: from(), body },
        Envelope::Request { id, body } => Incoming::Request(IncomingRequest {
            from: from(),
            body,
            responder: Responder::new(id, link.sender.clone()),
        }),
    };
    inbox.send(incoming).await.map_err(|_| ())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
