//! The inter-node transport: one authenticated, multiplexed TCP connection per pair of nodes,
//! carrying typed requests (answered by id, each with a timeout) and one-way messages.
//!
//! Connection ownership: of two nodes that know each other, the one whose name sorts first
//! dials and the other accepts, so a pair never keeps two connections. The dialer redials
//! with exponential backoff (and jitter) whenever the connection ends; the acceptor takes a
//! newer connection from the same peer in place of the old one (the peer restarted). A node
//! joining a cluster dials the node it joins whatever their names ([`Transport::dial_to_join`]),
//! since that node cannot know its address yet; the acceptor takes any dialer that proved
//! the secret. A peer that is not connected is
//! reported at once ([`TransportError::NotConnected`]); nothing is queued for it.
//!
//! The transport knows nothing of Raft: `Q` (requests and one-way messages) and `S`
//! (responses) are the layer above's types, typically enums whose variants name a Raft group.

use super::connection::{self, CloseReason, Link};
use super::envelope::{Envelope, RequestId};
use super::frame::{self, FrameError, MAX_FRAME_BYTES};
use super::handshake::{self, AcceptDeadlines, HandshakeError, Identity};
use super::handshake_slots::{source_of, HandshakeSlots};
use super::inbox::{Inbox, Incoming};
use super::log_limiter::LogLimiter;
use super::peer_address::PeerAddress;
use super::secret::ClusterSecret;
use rand::Rng;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// A payload the transport can carry.
pub trait Wire: Serialize + DeserializeOwned + Send + 'static {}
impl<T: Serialize + DeserializeOwned + Send + 'static> Wire for T {}

/// Time a peer has to complete the handshake. An incoming connection also has shorter
/// deadlines before it is authenticated ([`HELLO_TIMEOUT_MS`], [`PRE_AUTH_TIMEOUT_MS`]).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a request waits for its response unless the caller says otherwise.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Interval of heartbeats on an idle connection.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(200);
/// A connection on which nothing arrives for this long (five heartbeats missed) is closed
/// and redialled: this is how a hung, paused or black-holed peer is noticed, where nothing
/// closes the socket, so that its groups elect a new leader within about two seconds. A
/// reader that was itself starved of CPU for longer does not close a link whose frames have
/// arrived meanwhile: it reads what is there before it looks at the deadline.
pub const IDLE_TIMEOUT: Duration = Duration::from_millis(1_000);
/// Time allowed for a TCP connect to a peer.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// First and longest pause between dial attempts.
pub const RECONNECT_MIN_BACKOFF: Duration = Duration::from_millis(50);
/// See [`RECONNECT_MIN_BACKOFF`]. Low, since only cluster members are redialled: a link that
/// heals is back within a quarter of a second, before a second fault can find a node that
/// never caught up. A connect to a node that is down is refused at once and costs little.
pub const RECONNECT_MAX_BACKOFF: Duration = Duration::from_millis(250);
/// Bytes of frames that may wait for one peer's socket before senders wait.
pub const MAX_BUFFERED_BYTES_PER_PEER: usize = 2 * MAX_FRAME_BYTES;
/// How long a node joining a cluster keeps trying to connect to the node it joins through.
pub const JOIN_DIAL_WINDOW: Duration = Duration::from_secs(10);
/// Requests and messages received but not yet taken from the [`Inbox`].
pub const INBOX_CAPACITY: usize = 1024;
/// Incoming connections allowed in the handshake at once; more are closed at once.
pub const MAX_CONCURRENT_HANDSHAKES: usize = 64;
/// Of those, most from one source (an IPv4 address, an IPv6 /64) at once: sockets from one
/// source that say nothing cannot hold every slot and keep peers elsewhere out. A real peer
/// needs one, for milliseconds.
pub const MAX_CONCURRENT_HANDSHAKES_PER_SOURCE: usize = 4;
/// Time an incoming connection has, from its accept, to send its first handshake message
/// (a real peer sends it at once); capped by the handshake timeout.
pub const HELLO_TIMEOUT_MS: u64 = 1_000;
/// Time an incoming connection has, from its accept, to prove the secret (a real peer needs
/// one round trip); capped by the handshake timeout. Bounds how long a party without the
/// secret holds a handshake slot.
pub const PRE_AUTH_TIMEOUT_MS: u64 = 2_000;
/// Warnings about incoming connections from one source (refused, failed handshakes): at most
/// one line per this interval, carrying the count of those left out.
pub const CONNECTION_WARNING_INTERVAL_MS: u64 = 10_000;
/// Sources whose warnings are counted apart; more share one count (bounds the table).
pub const MAX_WARNED_SOURCES: usize = 1024;

/// How the transport runs. [`TransportSettings::new`] gives the defaults above.
#[derive(Debug, Clone)]
pub struct TransportSettings {
    /// This node's name, cluster name and secret.
    pub identity: Identity,
    /// See [`HANDSHAKE_TIMEOUT`].
    pub handshake_timeout: Duration,
    /// See [`DEFAULT_REQUEST_TIMEOUT`].
    pub request_timeout: Duration,
    /// See [`HEARTBEAT_INTERVAL`].
    pub heartbeat_interval: Duration,
    /// See [`IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
    /// See [`RECONNECT_MIN_BACKOFF`].
    pub reconnect_min_backoff: Duration,
    /// See [`RECONNECT_MAX_BACKOFF`].
    pub reconnect_max_backoff: Duration,
    /// See [`MAX_BUFFERED_BYTES_PER_PEER`]; at least [`MAX_FRAME_BYTES`] is used.
    pub max_buffered_bytes_per_peer: usize,
    /// See [`INBOX_CAPACITY`].
    pub inbox_capacity: usize,
}

impl TransportSettings {
    /// The default settings for node `node_name` of cluster `cluster_name`.
    pub fn new(node_name: &str, cluster_name: &str, secret: ClusterSecret) -> Self {
        TransportSettings {
            identity: Identity { cluster_name: cluster_name.to_string(), node_name: node_name.to_string(), secret },
            handshake_timeout: HANDSHAKE_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            heartbeat_interval: HEARTBEAT_INTERVAL,
            idle_timeout: IDLE_TIMEOUT,
            reconnect_min_backoff: RECONNECT_MIN_BACKOFF,
            reconnect_max_backoff: RECONNECT_MAX_BACKOFF,
            max_buffered_bytes_per_peer: MAX_BUFFERED_BYTES_PER_PEER,
            inbox_capacity: INBOX_CAPACITY,
        }
    }
}

/// A request or message that could not be delivered or answered.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// No authenticated connection to the peer right now.
    #[error("no connection to node {0}")]
    NotConnected(String),
    /// The connection ended before the answer came.
    #[error("the connection to node {0} was lost")]
    Disconnected(String),
    /// No answer in time (the request may or may not have been handled).
    #[error("node {peer} did not answer within {timeout:?}")]
    Timeout {
        /// The peer.
        peer: String,
        /// The time waited.
        timeout: Duration,
    },
    /// The payload cannot be encoded or is too large for one frame.
    #[error(transparent)]
    Frame(#[from] FrameError),
}

/// A node's end of the transport. Cheap to clone; [`Transport::shutdown`] stops it.
pub struct Transport<Q, S> {
    shared: Arc<Shared<Q, S>>,
}

impl<Q, S> Clone for Transport<Q, S> {
    fn clone(&self) -> Self {
        Transport { shared: Arc::clone(&self.shared) }
    }
}

/// A peer this node knows of.
struct PeerState<S> {
    /// The live connection, if any.
    link: Option<Link<S>>,
    /// The task dialling it, when this node is the dialling side.
    dialer: Option<JoinHandle<()>>,
    /// Since when nothing has arrived from it, once its last connection ended: the end, or
    /// the idle timeout before it when the link closed because the peer fell silent.
    silent_since: Option<Instant>,
}

struct Shared<Q, S> {
    settings: TransportSettings,
    local_addr: Option<SocketAddr>,
    peers: Mutex<HashMap<String, PeerState<S>>>,
    inbox: mpsc::Sender<Incoming<Q, S>>,
    next_request_id: AtomicU64,
    next_link_serial: AtomicU64,
    /// Bumped whenever a connection comes or goes.
    links_changed: watch::Sender<u64>,
    shutdown: watch::Sender<bool>,
    acceptor: Mutex<Option<JoinHandle<()>>>,
}

impl<Q: Wire, S: Wire> Transport<Q, S> {
    /// Starts the transport: accepts peers on `listener` (if any) and dials the `peers` whose
    /// names sort after this node's (entries naming this node are skipped). Returns the
    /// transport and the inbox of what peers send.
    pub fn start(
        settings: TransportSettings,
        listener: Option<TcpListener>,
        peers: &[PeerAddress],
    ) -> (Self, Inbox<Q, S>) {
        let (inbox, receiver) = mpsc::channel(settings.inbox_capacity.max(1));
        let shared = Arc::new(Shared {
            local_addr: listener.as_ref().and_then(|l| l.local_addr().ok()),
            settings,
            peers: Mutex::default(),
            inbox,
            next_request_id: AtomicU64::new(1),
            next_link_serial: AtomicU64::new(1),
            links_changed: watch::Sender::new(0),
            shutdown: watch::Sender::new(false),
            acceptor: Mutex::default(),
        });
        let transport = Transport { shared };
        if let Some(listener) = listener {
            let task = tokio::spawn(accept_loop(Arc::clone(&transport.shared), listener));
            *lock(&transport.shared.acceptor) = Some(task);
        }
        for peer in peers {
            transport.add_peer(peer);
        }
        (transport, Inbox { receiver })
    }

    /// The address the inter-node listener is bound to.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.shared.local_addr
    }

    /// This node's name.
    pub fn node_name(&self) -> &str {
        &self.shared.settings.identity.node_name
    }

    /// Makes `peer` known: dials it if this node is the dialling side of the pair (once; later
    /// calls for the same name are ignored); otherwise waits for it to dial.
    pub fn add_peer(&self, peer: &PeerAddress) {
        let local = self.node_name();
        if peer.name == local {
            return;
        }
        let mut peers = lock(&self.shared.peers);
        let state =
            peers.entry(peer.name.clone()).or_insert(PeerState { link: None, dialer: None, silent_since: None });
        if local < peer.name.as_str() && state.dialer.is_none() {
            state.dialer = Some(tokio::spawn(dial_loop(Arc::clone(&self.shared), peer.clone())));
        }
    }

    /// Connects to `peer`, the node this one joins the cluster through: as any peer
    /// ([`Transport::add_peer`]) if this node's name sorts first; otherwise once, with
    /// retries for [`JOIN_DIAL_WINDOW`], and not again when that connection ends: by then
    /// `peer` knows this node's address and dials it (its connection replaces this one).
    pub fn dial_to_join(&self, peer: &PeerAddress) {
        if self.node_name() < peer.name.as_str() {
            self.add_peer(peer);
        } else {
            tokio::spawn(dial_once(Arc::clone(&self.shared), peer.clone()));
        }
    }

    /// Sends `body` to `peer` and waits for its response, within the default request timeout.
    pub async fn request(&self, peer: &str, body: Q) -> Result<S, TransportError> {
        self.request_within(peer, body, self.shared.settings.request_timeout).await
    }

    /// Sends `body` to `peer` and waits for its response, within `timeout` (which also covers
    /// waiting for room in the peer's outgoing budget).
    pub async fn request_within(&self, peer: &str, body: Q, timeout: Duration) -> Result<S, TransportError> {
        let link = self.link(peer)?;
        let id: RequestId = self.shared.next_request_id.fetch_add(1, Ordering::Relaxed);
        let frame = frame::encode(&Envelope::<Q, ()>::Request { id, body }, MAX_FRAME_BYTES)?;
        link.call(id, frame, timeout).await
    }

    /// Sends `body` to `peer` with no answer expected; waits for room in the peer's outgoing
    /// budget at most the default request timeout. Delivery is not acknowledged.
    pub async fn send(&self, peer: &str, body: Q) -> Result<(), TransportError> {
        let serial = self.link(peer)?.serial;
        self.send_on(peer, serial, body).await
    }

    /// Sends `body` to `peer` on connection `serial` only: not at all if that connection
    /// went (what was meant for it makes no sense on the next one). As [`Transport::send`]
    /// otherwise.
    pub async fn send_on(&self, peer: &str, serial: u64, body: Q) -> Result<(), TransportError> {
        let link = self.link(peer)?;
        if link.serial != serial {
            return Err(TransportError::Disconnected(peer.to_string()));
        }
        let frame = frame::encode(&Envelope::<Q, ()>::OneWay { body }, MAX_FRAME_BYTES)?;
        let timeout = self.shared.settings.request_timeout;
        tokio::time::timeout(timeout, link.send(frame))
            .await
            .unwrap_or_else(|_| Err(TransportError::Timeout { peer: peer.to_string(), timeout }))
    }

    /// The serial number of the live connection to `peer`, if any: a new connection gets a
    /// new one.
    pub fn link_serial(&self, peer: &str) -> Option<u64> {
        lock(&self.shared.peers).get(peer).and_then(|state| state.link.as_ref().map(|link| link.serial))
    }

    /// Changes whenever a connection comes or goes.
    pub fn link_changes(&self) -> watch::Receiver<u64> {
        self.shared.links_changed.subscribe()
    }

    /// The peers with a live connection, sorted.
    pub fn connected_peers(&self) -> Vec<String> {
        let peers = lock(&self.shared.peers);
        let mut names: Vec<String> =
            peers.iter().filter(|(_, state)| state.link.is_some()).map(|(name, _)| name.clone()).collect();
        names.sort();
        names
    }

    /// Since when nothing has arrived from `peer`, if it is not connected now and was once
    /// (a peer that fell silent until its link's idle timeout was silent since before it).
    pub fn silent_since(&self, peer: &str) -> Option<Instant> {
        let peers = lock(&self.shared.peers);
        peers.get(peer).filter(|state| state.link.is_none()).and_then(|state| state.silent_since)
    }

    /// Waits until `peer` is connected; false if `timeout` passes first.
    pub async fn wait_connected(&self, peer: &str, timeout: Duration) -> bool {
        let mut changes = self.shared.links_changed.subscribe();
        let connected = || lock(&self.shared.peers).get(peer).is_some_and(|state| state.link.is_some());
        let wait = async {
            while !connected() {
                if changes.changed().await.is_err() {
                    return false;
                }
            }
            true
        };
        tokio::time::timeout(timeout, wait).await.unwrap_or(false)
    }

    /// Stops accepting and dialling, closes every connection (requests in flight fail) and
    /// releases the listener's port.
    pub async fn shutdown(&self) {
        self.shared.shutdown.send_replace(true);
        let acceptor = lock(&self.shared.acceptor).take();
        if let Some(task) = acceptor {
            let _ = task.await;
        }
        let dialers: Vec<JoinHandle<()>> =
            lock(&self.shared.peers).values_mut().filter_map(|state| state.dialer.take()).collect();
        for task in dialers {
            let _ = task.await;
        }
    }

    fn link(&self, peer: &str) -> Result<Link<S>, TransportError> {
        let peers = lock(&self.shared.peers);
        peers
            .get(peer)
            .and_then(|state| state.link.clone())
            .ok_or_else(|| TransportError::NotConnected(peer.to_string()))
    }
}

impl<Q: Wire, S: Wire> Shared<Q, S> {
    fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Registers a new connection to `peer`, closing the one it replaces.
    fn register(&self, peer: &str, link: Link<S>) {
        let mut peers = lock(&self.peers);
        let state = peers.entry(peer.to_string()).or_insert(PeerState { link: None, dialer: None, silent_since: None });
        state.silent_since = None;
        if let Some(old) = state.link.replace(link) {
            old.close();
        }
        drop(peers);
        self.links_changed.send_modify(|n| *n += 1);
    }

    /// Forgets connection `serial` to `peer` if it is still the registered one; nothing has
    /// arrived on it since `silent_since`.
    fn unregister(&self, peer: &str, serial: u64, silent_since: Instant) {
        let mut peers = lock(&self.peers);
        if let Some(state) = peers.get_mut(peer) {
            if state.link.as_ref().is_some_and(|link| link.serial == serial) {
                state.link = None;
                state.silent_since = Some(silent_since);
            }
        }
        drop(peers);
        self.links_changed.send_modify(|n| *n += 1);
    }

    /// Serves an authenticated connection to `peer` until it ends.
    async fn run_connection(self: &Arc<Self>, peer: &str, framed: frame::FramedStream) {
        let serial = self.next_link_serial.fetch_add(1, Ordering::Relaxed);
        let budget = self.settings.max_buffered_bytes_per_peer.max(MAX_FRAME_BYTES);
        let (link, task) = Link::new(peer, serial, budget);
        self.register(peer, link.clone());
        tracing::info!(peer, "cluster peer connected");
        let mut shutdown = self.shutdown.subscribe();
        let reason = connection::serve(framed, link, task, self.inbox.clone(), &self.settings, &mut shutdown).await;
        let silent_since = match reason {
            CloseReason::Idle(idle) => Instant::now().checked_sub(idle).unwrap_or_else(Instant::now),
            _ => Instant::now(),
        };
        self.unregister(peer, serial, silent_since);
        tracing::info!(peer, %reason, "cluster peer disconnected");
    }

    /// Whether an authenticated dialer may connect: any, unless this node is stopping.
    fn admit(&self, _peer: &str) -> Result<(), String> {
        if self.is_shutting_down() {
            return Err("the node is shutting down".to_string());
        }
        Ok(())
    }
}

/// What the accept loop shares with the handshakes it starts: their slots, and the limit on
/// what connections that anybody can open make this node log.
struct Gate {
    slots: HandshakeSlots,
    warnings: Mutex<LogLimiter<IpAddr>>,
}

impl Gate {
    fn new() -> Self {
        let interval = Duration::from_millis(CONNECTION_WARNING_INTERVAL_MS);
        Gate {
            slots: HandshakeSlots::new(MAX_CONCURRENT_HANDSHAKES, MAX_CONCURRENT_HANDSHAKES_PER_SOURCE),
            warnings: Mutex::new(LogLimiter::new(interval, MAX_WARNED_SOURCES)),
        }
    }

    /// Logs `event` about a connection from `remote`, unless its source had a line within
    /// the interval (the next line then says how many were left out).
    fn warn(&self, remote: SocketAddr, event: &dyn fmt::Display) {
        let line = lock(&self.warnings).event(source_of(remote.ip()), Instant::now());
        if let Some(line) = line {
            tracing::warn!(%remote, "{event}{line}");
        }
    }
}

/// Accepts incoming connections until shutdown; each gets a bounded handshake.
async fn accept_loop<Q: Wire, S: Wire>(shared: Arc<Shared<Q, S>>, listener: TcpListener) {
    let gate = Arc::new(Gate::new());
    // Failures of the listener itself (out of descriptors, say) come at the pace of
    // connection attempts too; one line per interval, under a single key.
    let mut listener_warnings = LogLimiter::new(Duration::from_millis(CONNECTION_WARNING_INTERVAL_MS), 1);
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stopped(&mut shutdown) => return,
        };
        match accepted {
            Ok((stream, remote)) => start_handshake(&shared, &gate, stream, remote),
            Err(error) => {
                if let Some(line) = listener_warnings.event((), Instant::now()) {
                    tracing::warn!(%error, "cluster listener: accept failed{line}");
                }
                tokio::time::sleep(RECONNECT_MIN_BACKOFF).await;
            }
        }
    }
}

/// Runs the handshake of a connection from `remote` in a task of its own, if it gets a slot;
/// otherwise closes it at once.
fn start_handshake<Q: Wire, S: Wire>(
    shared: &Arc<Shared<Q, S>>,
    gate: &Arc<Gate>,
    stream: TcpStream,
    remote: SocketAddr,
) {
    let slot = match gate.slots.try_take(remote.ip()) {
        Ok(slot) => slot,
        Err(no_slot) => return gate.warn(remote, &format_args!("cluster listener: {no_slot}")),
    };
    let (shared, gate) = (Arc::clone(shared), Arc::clone(gate));
    tokio::spawn(async move {
        let accepted = accept_one(&shared, stream).await;
        drop(slot);
        match accepted {
            Ok((peer, framed)) => shared.run_connection(&peer, framed).await,
            Err(error) => gate.warn(remote, &format_args!("cluster connection refused: {error}")),
        }
    });
}

/// The acceptor's handshake on `stream`, within the handshake timeout and, before the peer
/// is authenticated, the shorter deadlines.
async fn accept_one<Q: Wire, S: Wire>(
    shared: &Arc<Shared<Q, S>>,
    stream: TcpStream,
) -> Result<(String, frame::FramedStream), HandshakeError> {
    let _ = stream.set_nodelay(true);
    let identity = &shared.settings.identity;
    let timeout = shared.settings.handshake_timeout;
    let deadlines = accept_deadlines(tokio::time::Instant::now(), timeout);
    let handshake = handshake::accept(stream, identity, deadlines, |peer| shared.admit(peer));
    match tokio::time::timeout(timeout, handshake).await {
        Ok(result) => result,
        Err(_) => Err(HandshakeError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("handshake not completed within {timeout:?}"),
        ))),
    }
}

/// The deadlines of a connection accepted at `accepted`: [`HELLO_TIMEOUT_MS`] and
/// [`PRE_AUTH_TIMEOUT_MS`] later, or `handshake_timeout` if that is shorter.
fn accept_deadlines(accepted: tokio::time::Instant, handshake_timeout: Duration) -> AcceptDeadlines {
    let within = |ms| accepted + handshake_timeout.min(Duration::from_millis(ms));
    AcceptDeadlines { hello: within(HELLO_TIMEOUT_MS), proof: within(PRE_AUTH_TIMEOUT_MS) }
}

/// Keeps a connection to `peer` open until shutdown, redialling with backoff.
async fn dial_loop<Q: Wire, S: Wire>(shared: Arc<Shared<Q, S>>, peer: PeerAddress) {
    let mut backoff = Backoff::new(shared.settings.reconnect_min_backoff, shared.settings.reconnect_max_backoff);
    let mut shutdown = shared.shutdown.subscribe();
    let mut failures_in_a_row = 0u32;
    while !shared.is_shutting_down() {
        match dial_one(&shared, &peer).await {
            Ok(framed) => {
                backoff.reset();
                failures_in_a_row = 0;
                shared.run_connection(&peer.name, framed).await;
            }
            Err(error) => {
                failures_in_a_row += 1;
                // The first failure is worth a warning; a peer that stays down is not news.
                if failures_in_a_row == 1 {
                    tracing::warn!(peer = %peer, %error, "cannot connect to cluster peer; retrying");
                } else {
                    tracing::debug!(peer = %peer, %error, "cannot connect to cluster peer; retrying");
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff.next_pause()) => {}
            () = stopped(&mut shutdown) => return,
        }
    }
}

/// Connects to `peer` (retrying for [`JOIN_DIAL_WINDOW`]) and serves the connection until it
/// ends; no redial after that.
async fn dial_once<Q: Wire, S: Wire>(shared: Arc<Shared<Q, S>>, peer: PeerAddress) {
    let mut backoff = Backoff::new(shared.settings.reconnect_min_backoff, shared.settings.reconnect_max_backoff);
    let deadline = tokio::time::Instant::now() + JOIN_DIAL_WINDOW;
    while !shared.is_shutting_down() && tokio::time::Instant::now() < deadline {
        match dial_one(&shared, &peer).await {
            Ok(framed) => return shared.run_connection(&peer.name, framed).await,
            Err(error) => tracing::debug!(peer = %peer, %error, "cannot connect to the node to join; retrying"),
        }
        tokio::time::sleep(backoff.next_pause()).await;
    }
    tracing::warn!(peer = %peer, "cannot connect to the node to join");
}

/// A dial failure.
#[derive(Debug, thiserror::Error)]
enum DialError {
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("connect timed out after {0:?}")]
    ConnectTimeout(Duration),
    #[error("handshake: {0}")]
    Handshake(HandshakeError),
    #[error("handshake not completed within {0:?}")]
    HandshakeTimeout(Duration),
}

async fn dial_one<Q: Wire, S: Wire>(
    shared: &Shared<Q, S>,
    peer: &PeerAddress,
) -> Result<frame::FramedStream, DialError> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(peer.address.as_str()))
        .await
        .map_err(|_| DialError::ConnectTimeout(CONNECT_TIMEOUT))?
        .map_err(DialError::Connect)?;
    let _ = stream.set_nodelay(true);
    let timeout = shared.settings.handshake_timeout;
    tokio::time::timeout(timeout, handshake::dial(stream, &shared.settings.identity, &peer.name))
        .await
        .map_err(|_| DialError::HandshakeTimeout(timeout))?
        .map_err(DialError::Handshake)
}

/// Exponential backoff with jitter: each pause is drawn from the upper half of a ceiling that
/// doubles from `min` up to `max`.
struct Backoff {
    min: Duration,
    max: Duration,
    ceiling: Duration,
}

impl Backoff {
    fn new(min: Duration, max: Duration) -> Self {
        Backoff { min, max: max.max(min), ceiling: min }
    }

    fn reset(&mut self) {
        self.ceiling = self.min;
    }

    fn next_pause(&mut self) -> Duration {
        let ceiling = self.ceiling;
        self.ceiling = (self.ceiling * 2).min(self.max);
        let half = ceiling / 2;
        half + rand::thread_rng().gen_range(Duration::ZERO..=half)
    }
}

/// Resolves once `shutdown` says stop (or its sender is gone).
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pre_authentication_deadlines_are_short_and_never_beyond_the_handshake_timeout() {
        let now = tokio::time::Instant::now();
        let deadlines = accept_deadlines(now, HANDSHAKE_TIMEOUT);
        assert_eq!(deadlines.hello - now, Duration::from_millis(HELLO_TIMEOUT_MS));
        assert_eq!(deadlines.proof - now, Duration::from_millis(PRE_AUTH_TIMEOUT_MS));
        assert!(deadlines.proof - now < HANDSHAKE_TIMEOUT);
        let short = Duration::from_millis(300);
        let deadlines = accept_deadlines(now, short);
        assert_eq!((deadlines.hello - now, deadlines.proof - now), (short, short));
    }

    #[test]
    fn backoff_doubles_up_to_the_maximum_and_resets() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
        let pauses: Vec<Duration> = (0..5).map(|_| backoff.next_pause()).collect();
        let ceilings = [100, 200, 350, 350, 350];
        for (pause, ceiling) in pauses.iter().zip(ceilings) {
            let ceiling = Duration::from_millis(ceiling);
            assert!(*pause >= ceiling / 2 && *pause <= ceiling, "{pause:?} outside ({ceiling:?}/2, {ceiling:?})");
        }
        backoff.reset();
        assert!(backoff.next_pause() <= Duration::from_millis(100));
    }
}
