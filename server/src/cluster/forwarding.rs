//! Forwarded client operations on the transport: the core's `Forwarding` (see
//! `warren_delivery::remote`) as this node runs it.
//!
//! Each peer gets an outbox: what the core sends to it is queued without blocking (the core
//! sends under its locks) and written by one task per peer, in order, on the connection that
//! was live when it was queued, never on a later one: when a connection goes, both nodes
//! forget what was in flight between them ([`watch_links`] tells the core), and a message
//! meant for the old connection would make no sense on the new. The outbox counts the bytes
//! it holds: above [`OUTBOX_HIGH_WATER_BYTES`] deliveries to that peer's clients hold back,
//! and resume below [`OUTBOX_LOW_WATER_BYTES`].

use super::nodes::Nodes;
use super::service::{ClusterTransport, PeerRequest};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use tokio::sync::mpsc;
use warren_delivery::remote::{Forwarded, Forwarder, Forwarding};

/// Above this many bytes waiting for a peer, deliveries to its clients hold back.
pub const OUTBOX_HIGH_WATER_BYTES: usize = 8 << 20;
/// Below this many, they resume.
pub const OUTBOX_LOW_WATER_BYTES: usize = 2 << 20;
/// What a forwarded message counts for besides its bodies (names, tags, framing).
const MESSAGE_OVERHEAD_BYTES: usize = 128;

/// Forwarding over the cluster transport. The core holds it; it holds the core's end only
/// weakly.
pub struct ClusterForwarding {
    transport: ClusterTransport,
    nodes: Arc<Nodes>,
    outboxes: Mutex<HashMap<u64, Arc<Outbox>>>,
    /// The core's end, told when an outbox drains (shared with the outboxes' tasks).
    forwarder: Arc<OnceLock<Weak<Forwarder>>>,
}

impl std::fmt::Debug for ClusterForwarding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterForwarding").field("nodes", &self.nodes).finish_non_exhaustive()
    }
}

/// What waits to be sent to one peer.
struct Outbox {
    sender: mpsc::UnboundedSender<(u64, Forwarded, usize)>,
    bytes: AtomicUsize,
    /// Deliveries held back since the outbox passed its high water mark.
    held: AtomicBool,
}

/// Bytes a message accounts for in its outbox.
fn size_of(message: &Forwarded) -> usize {
    let bodies = match message {
        Forwarded::Publish { messages, .. } => messages.iter().map(|m| m.body.len() + m.properties.len()).sum(),
        Forwarded::Deliver { message, .. } => message.body.len() + message.properties.len(),
        Forwarded::Answer { answer: warren_delivery::remote::RemoteAnswer::Got(Ok(Some(got))), .. } => {
            got.message.body.len()
        }
        _ => 0,
    };
    bodies + MESSAGE_OVERHEAD_BYTES
}

impl ClusterForwarding {
    /// Forwarding to the other `nodes` over `transport`.
    pub fn new(transport: ClusterTransport, nodes: Arc<Nodes>) -> Arc<Self> {
        Arc::new(ClusterForwarding {
            transport,
            nodes,
            outboxes: Mutex::new(HashMap::new()),
            forwarder: Arc::new(OnceLock::new()),
        })
    }

    /// Tells `forwarder` when outboxes drain, and when links go ([`watch_links`]).
    pub fn serve(self: &Arc<Self>, forwarder: &Arc<Forwarder>) {
        let _ = self.forwarder.set(Arc::downgrade(forwarder));
        tokio::spawn(watch_links(self.transport.clone(), Arc::clone(&self.nodes), Arc::downgrade(forwarder)));
    }

    fn outbox(&self, node: u64) -> Option<Arc<Outbox>> {
        let name = self.nodes.name_of(node)?;
        let mut outboxes = self.outboxes.lock().unwrap_or_else(PoisonError::into_inner);
        let outbox = outboxes.entry(node).or_insert_with(|| {
            let (sender, receiver) = mpsc::unbounded_channel();
            let outbox = Arc::new(Outbox { sender, bytes: AtomicUsize::new(0), held: AtomicBool::new(false) });
            let (transport, forwarder) = (self.transport.clone(), Arc::clone(&self.forwarder));
            tokio::spawn(drain(transport, forwarder, node, name, Arc::clone(&outbox), receiver));
            outbox
        });
        Some(Arc::clone(outbox))
    }
}

impl Forwarding for ClusterForwarding {
    fn send(&self, node: u64, message: Forwarded) {
        let Some(name) = self.nodes.name_of(node) else {
            tracing::warn!(node, "a forwarded message for an unknown node was dropped");
            return;
        };
        // Queued for the connection live now; none: dropped (the link's loss is reported).
        let Some(serial) = self.transport.link_serial(&name) else {
            tracing::debug!(peer = %name, "a forwarded message for a peer not connected was dropped");
            return;
        };
        let Some(outbox) = self.outbox(node) else { return };
        let size = size_of(&message);
        outbox.bytes.fetch_add(size, Ordering::AcqRel);
        let _ = outbox.sender.send((serial, message, size));
    }

    fn has_room(&self, node: u64) -> bool {
        let Some(outbox) = self.outbox(node) else { return true };
        if outbox.bytes.load(Ordering::Acquire) < OUTBOX_HIGH_WATER_BYTES {
            return true;
        }
        outbox.held.store(true, Ordering::Release);
        false
    }
}

/// Writes what is queued for `name`, in order, until the forwarding goes.
async fn drain(
    transport: ClusterTransport,
    forwarder: Arc<OnceLock<Weak<Forwarder>>>,
    node: u64,
    name: String,
    outbox: Arc<Outbox>,
    mut queued: mpsc::UnboundedReceiver<(u64, Forwarded, usize)>,
) {
    while let Some((serial, message, size)) = queued.recv().await {
        if let Err(error) = transport.send_on(&name, serial, PeerRequest::Forwarded(message)).await {
            tracing::debug!(peer = %name, %error, "a forwarded message was not sent");
        }
        let left = outbox.bytes.fetch_sub(size, Ordering::AcqRel) - size;
        if left < OUTBOX_LOW_WATER_BYTES && outbox.held.swap(false, Ordering::AcqRel) {
            if let Some(forwarder) = forwarder.get().and_then(Weak::upgrade) {
                forwarder.resume(node);
            }
        }
    }
}

/// Tells the core whenever the connection to a peer goes (or is replaced by a new one):
/// what was in flight between the two nodes is forgotten on both sides.
pub async fn watch_links(transport: ClusterTransport, nodes: Arc<Nodes>, forwarder: Weak<Forwarder>) {
    let mut changes = transport.link_changes();
    let mut serials: BTreeMap<u64, Option<u64>> =
        nodes.peers().into_iter().map(|(id, n)| (id, transport.link_serial(&n))).collect();
    while changes.changed().await.is_ok() {
        let Some(forwarder) = forwarder.upgrade() else { return };
        for (id, name) in nodes.peers() {
            let now = transport.link_serial(&name);
            let before = serials.insert(id, now).flatten();
            if before.is_some() && before != now {
                tracing::info!(peer = %name, "link to a peer lost: forwarded consumers and channels with it end");
                forwarder.node_down(id);
            }
        }
    }
}
