//! The client connections of this node as the management API lists and closes them: who is
//! connected from where, as which user, in which virtual host, with which channels.
//!
//! The protocol layer registers each connection when it accepts it ([`Connections::open`]),
//! fills in what the handshake tells ([`ConnectionInfo::logged_in`], [`ConnectionInfo::tuned`]),
//! adds and removes its channels, and counts the bytes it reads and writes; it drops the
//! [`Registered`] handle when the connection ends. A close asked for by an operator
//! ([`ConnectionInfo::request_close`]) is a watch the connection's read loop selects on.

use crate::connection_id::ConnectionId;
use crate::session::Session;
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use tokio::sync::watch;

/// What the handshake told of a connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handshake {
    /// The user it logged in as (escaped).
    pub user: Option<String>,
    /// The SASL mechanism it used.
    pub auth_mechanism: String,
    /// The virtual host it opened.
    pub vhost: Option<String>,
    /// Client properties worth showing: `product`, `version`, `platform`, `connection_name`
    /// and the like, as text (escaped and cut).
    pub client_properties: Vec<(String, String)>,
    /// Negotiated `channel_max`.
    pub channel_max: u16,
    /// Negotiated `frame_max`.
    pub frame_max: u32,
    /// Negotiated heartbeat, in seconds.
    pub heartbeat_secs: u16,
}

/// The protocol a client connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientProtocol {
    /// AMQP 0-9-1 (and AMQPS).
    Amqp091,
    /// RabbitMQ's Stream protocol.
    Stream,
}

impl ClientProtocol {
    /// Its name as RabbitMQ's management API shows it.
    pub fn name(self) -> &'static str {
        match self {
            ClientProtocol::Amqp091 => "AMQP 0-9-1",
            ClientProtocol::Stream => "stream",
        }
    }
}

/// A publisher a Stream-protocol connection declared, as the management API lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPublisher {
    /// Its id on the connection.
    pub id: u8,
    /// The stream it publishes to.
    pub stream: String,
    /// Its reference (for deduplication), if it has one.
    pub reference: Option<String>,
}

/// One client connection.
#[derive(Debug)]
pub struct ConnectionInfo {
    /// The protocol it speaks.
    pub protocol: ClientProtocol,
    /// Its id in the broker.
    pub id: ConnectionId,
    /// Its name, as RabbitMQ names connections: `peer -> local`.
    pub name: String,
    /// The client's address.
    pub peer: SocketAddr,
    /// The broker's address it connected to.
    pub local: SocketAddr,
    /// When it connected (ms since the Unix epoch).
    pub connected_at_ms: u64,
    /// Whether it came over TLS (AMQPS).
    pub tls: bool,
    handshake: Mutex<Handshake>,
    channels: Mutex<BTreeMap<u16, Arc<Session>>>,
    stream_publishers: Mutex<BTreeMap<u8, StreamPublisher>>,
    received_bytes: AtomicU64,
    sent_bytes: AtomicU64,
    close_request: watch::Sender<Option<String>>,
}

impl ConnectionInfo {
    /// What the handshake told so far.
    pub fn handshake(&self) -> Handshake {
        self.handshake.lock().clone()
    }

    /// The client logged in as `user` with `mechanism`, with these client properties.
    pub fn logged_in(&self, user: &str, mechanism: &str, client_properties: Vec<(String, String)>) {
        let mut handshake = self.handshake.lock();
        handshake.user = Some(user.to_string());
        handshake.auth_mechanism = mechanism.to_string();
        handshake.client_properties = client_properties;
    }

    /// The tuning was agreed.
    pub fn tuned(&self, channel_max: u16, frame_max: u32, heartbeat_secs: u16) {
        let mut handshake = self.handshake.lock();
        (handshake.channel_max, handshake.frame_max, handshake.heartbeat_secs) =
            (channel_max, frame_max, heartbeat_secs);
    }

    /// The client opened virtual host `vhost`.
    pub fn opened(&self, vhost: &str) {
        self.handshake.lock().vhost = Some(vhost.to_string());
    }

    /// Channel `number` was opened, served by `session`.
    pub fn channel_opened(&self, number: u16, session: Arc<Session>) {
        if self.channels.lock().insert(number, session).is_none() {
            crate::node_counters::CHANNELS_OPENED.add();
        }
    }

    /// Channel `number` closed.
    pub fn channel_closed(&self, number: u16) {
        if self.channels.lock().remove(&number).is_some() {
            crate::node_counters::CHANNELS_CLOSED.add();
        }
    }

    /// Its open channels, by number.
    pub fn channels(&self) -> Vec<(u16, Arc<Session>)> {
        self.channels.lock().iter().map(|(number, session)| (*number, Arc::clone(session))).collect()
    }

    /// `bytes` more were read from the client.
    pub fn received(&self, bytes: usize) {
        self.received_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// `bytes` more were written to the client.
    pub fn sent(&self, bytes: usize) {
        self.sent_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Bytes read from and written to the client so far.
    pub fn traffic_bytes(&self) -> (u64, u64) {
        (self.received_bytes.load(Ordering::Relaxed), self.sent_bytes.load(Ordering::Relaxed))
    }

    /// A Stream-protocol publisher was declared on the connection.
    pub fn publisher_declared(&self, publisher: StreamPublisher) {
        self.stream_publishers.lock().insert(publisher.id, publisher);
    }

    /// The Stream-protocol publisher `id` was deleted (or its stream was).
    pub fn publisher_deleted(&self, id: u8) {
        self.stream_publishers.lock().remove(&id);
    }

    /// The connection's Stream-protocol publishers, by id.
    pub fn stream_publishers(&self) -> Vec<StreamPublisher> {
        self.stream_publishers.lock().values().cloned().collect()
    }

    /// An operator asks for the connection to be closed, saying `reason` to the client.
    pub fn request_close(&self, reason: &str) {
        self.close_request.send_replace(Some(reason.to_string()));
    }

    /// Changes to `Some(reason)` when a close is asked for.
    pub fn close_requests(&self) -> watch::Receiver<Option<String>> {
        self.close_request.subscribe()
    }
}

/// This node's client connections, by id.
#[derive(Debug, Default)]
pub struct Connections {
    by_id: RwLock<BTreeMap<ConnectionId, Arc<ConnectionInfo>>>,
}

/// A connection's place in the registry: it leaves the registry when this is dropped.
#[derive(Debug)]
pub struct Registered {
    info: Arc<ConnectionInfo>,
    registry: Weak<Connections>,
}

impl Registered {
    /// The connection's entry.
    pub fn info(&self) -> &Arc<ConnectionInfo> {
        &self.info
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.by_id.write().remove(&self.info.id);
        }
        // Its channels end with it.
        for _ in self.info.channels.lock().iter() {
            crate::node_counters::CHANNELS_CLOSED.add();
        }
        crate::node_counters::CONNECTIONS_CLOSED.add();
    }
}

impl Connections {
    /// Registers connection `id` from `peer` to `local` (over TLS if `tls`), connected now.
    pub fn open(self: &Arc<Self>, id: ConnectionId, (peer, local): (SocketAddr, SocketAddr), tls: bool) -> Registered {
        self.open_speaking(ClientProtocol::Amqp091, id, (peer, local), tls)
    }

    /// [`Connections::open`] of a connection that speaks `protocol`.
    pub fn open_speaking(
        self: &Arc<Self>,
        protocol: ClientProtocol,
        id: ConnectionId,
        (peer, local): (SocketAddr, SocketAddr),
        tls: bool,
    ) -> Registered {
        let info = Arc::new(ConnectionInfo {
            protocol,
            id,
            name: format!("{peer} -> {local}"),
            peer,
            local,
            connected_at_ms: crate::clock::now_ms(),
            tls,
            handshake: Mutex::new(Handshake::default()),
            channels: Mutex::new(BTreeMap::new()),
            stream_publishers: Mutex::new(BTreeMap::new()),
            received_bytes: AtomicU64::new(0),
            sent_bytes: AtomicU64::new(0),
            close_request: watch::Sender::new(None),
        });
        self.by_id.write().insert(id, Arc::clone(&info));
        crate::node_counters::CONNECTIONS_OPENED.add();
        Registered { info, registry: Arc::downgrade(self) }
    }

    /// Every connection, oldest first.
    pub fn all(&self) -> Vec<Arc<ConnectionInfo>> {
        self.by_id.read().values().cloned().collect()
    }

    /// The connection called `name`.
    pub fn named(&self, name: &str) -> Option<Arc<ConnectionInfo>> {
        self.by_id.read().values().find(|info| info.name == name).cloned()
    }

    /// How many there are.
    pub fn count(&self) -> usize {
        self.by_id.read().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_is_listed_until_its_handle_goes() {
        let registry = Arc::new(Connections::default());
        let (peer, local) = ("127.0.0.1:50000".parse().unwrap(), "127.0.0.1:5672".parse().unwrap());
        let registered = registry.open(ConnectionId(7), (peer, local), false);
        assert_eq!(registered.info().name, "127.0.0.1:50000 -> 127.0.0.1:5672");
        registered.info().logged_in("guest", "PLAIN", vec![("product".into(), "pika".into())]);
        let found = registry.named("127.0.0.1:50000 -> 127.0.0.1:5672").expect("listed");
        assert_eq!(found.handshake().user.as_deref(), Some("guest"));
        let mut requests = found.close_requests();
        found.request_close("maintenance");
        assert_eq!(requests.borrow_and_update().as_deref(), Some("maintenance"));
        drop(registered);
        assert_eq!(registry.count(), 0);
    }
}
