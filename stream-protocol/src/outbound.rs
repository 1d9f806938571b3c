//! The connection's writer: one task that owns the socket's write half and everything bound
//! for it, encoded frames and the subscriptions' deliveries, so that what is ready goes out
//! in one write.

use crate::response;
use crate::subscription::Pending;
use bytes::BytesMut;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc::UnboundedReceiver;
use warren_delivery::connections::ConnectionInfo;
use warren_delivery::Delivery;

/// Bytes gathered before they are written, at most (more is written in the next round).
const WRITE_BATCH_BYTES: usize = 256 * 1024;

/// What the writer is handed.
#[derive(Debug)]
pub enum Outbound {
    /// Frames, encoded.
    Frames(BytesMut),
    /// A subscription starts: its deliveries are held here until it has credit.
    Subscribed(Box<Pending>),
    /// A delivery for the subscription with this id.
    Delivery(u8, Delivery),
    /// The subscription was answered: its chunks may go.
    Started(u8),
    /// The subscription got credit.
    Credited(u8),
    /// The subscription ended: what it held is dropped (its session returns it to the stream).
    Unsubscribed(u8),
    /// The stream of the subscription was deleted.
    StreamGone(u8),
    /// The connection is over: what was handed over before is written, then the socket shut.
    Shutdown,
}

/// Writes until the connection's side drops its sender or the socket fails.
pub async fn write_loop(
    mut socket: impl AsyncWrite + Unpin,
    mut inbox: UnboundedReceiver<Outbound>,
    info: Arc<ConnectionInfo>,
) {
    let mut out = BytesMut::with_capacity(64 * 1024);
    let mut pending: HashMap<u8, Pending> = HashMap::new();
    let mut open = true;
    while open {
        let Some(first) = inbox.recv().await else { break };
        open = take(first, &mut out, &mut pending);
        while open && out.len() < WRITE_BATCH_BYTES {
            match inbox.try_recv() {
                Ok(next) => open = take(next, &mut out, &mut pending),
                Err(_) => break,
            }
        }
        for subscription in pending.values_mut() {
            subscription.write_chunks(&mut out);
        }
        if out.is_empty() {
            continue;
        }
        if socket.write_all(&out).await.is_err() {
            return;
        }
        info.sent(out.len());
        out.clear();
    }
    let _ = socket.shutdown().await;
}

/// Takes one thing to write; false once the connection is over.
fn take(outbound: Outbound, out: &mut BytesMut, pending: &mut HashMap<u8, Pending>) -> bool {
    match outbound {
        Outbound::Shutdown => return false,
        Outbound::Frames(frames) => out.extend_from_slice(&frames),
        Outbound::Subscribed(subscription) => {
            pending.insert(subscription.subscription.id, *subscription);
        }
        Outbound::Delivery(id, delivery) => {
            if let Some(subscription) = pending.get_mut(&id) {
                subscription.deliveries.push_back(delivery);
            }
        }
        Outbound::Started(id) => {
            if let Some(subscription) = pending.get_mut(&id) {
                subscription.started = true;
            }
        }
        // The chunks are written after the batch, with the credit there is then.
        Outbound::Credited(_) => {}
        Outbound::Unsubscribed(id) => {
            pending.remove(&id);
        }
        Outbound::StreamGone(id) => {
            if let Some(gone) = pending.remove(&id) {
                response::metadata_update(
                    out,
                    crate::command::ResponseCode::StreamNotAvailable,
                    &gone.subscription.stream,
                );
            }
        }
    }
    true
}
