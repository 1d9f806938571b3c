//! Publishing: a connection's declared publishers, and what becomes of each `Publish`.
//!
//! A message goes to its stream as a 0-9-1 publish to the default exchange would (the same
//! log, the same confirms), converted from AMQP 1.0 ([`crate::amqp10`]). It is confirmed
//! once it is as safe as the stream promises (fsynced, or committed on a majority of a
//! replicated stream). A publisher with a reference deduplicates: a publishing id at or below
//! the highest one confirmed for that reference is confirmed again and not stored, and the
//! highest one is kept with the stream's offsets, so that it survives a reconnect and a
//! restart (QueryPublisherSequence reads it).

use crate::amqp10;
use crate::command::ResponseCode;
use crate::outbound::Outbound;
use crate::request::{PublishedEntry, PublishedMessage};
use crate::response;
use crate::sub_entry;
use bytes::BytesMut;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;
use warren_delivery::message_store::DurableMark;
use warren_delivery::stream::NamedOffset;
use warren_delivery::{Queue, VirtualHost};

/// The longest publisher reference (the protocol's 256 characters).
pub const MAX_REFERENCE_BYTES: usize = 256;

/// A declared publisher.
#[derive(Debug)]
pub struct Publisher {
    /// The stream it publishes to.
    pub stream: String,
    /// That stream, as it was when the publisher was declared: a stream deleted (or made
    /// anew) since is not this one.
    pub queue: Arc<Queue>,
    /// Its name, for deduplication.
    pub reference: Option<String>,
    /// The highest publishing id stored for its reference (None: nothing yet).
    pub sequence: Option<u64>,
}

/// A Publish's messages, once handed to the stream: what to confirm when.
#[derive(Debug, Default)]
struct Outcome {
    /// Ids to confirm once `marks` are durable.
    confirm: Vec<u64>,
    marks: Vec<DurableMark>,
    /// Ids refused, with why.
    errors: Vec<(u64, ResponseCode)>,
}

/// Publishes `messages` for publisher `id`; confirms and errors go to `out` when they are due.
pub fn publish(
    vhost: &Arc<VirtualHost>,
    out: &UnboundedSender<Outbound>,
    id: u8,
    publisher: &mut Publisher,
    messages: Vec<PublishedMessage>,
) {
    let mut outcome = Outcome::default();
    for message in messages {
        let publishing_id = message.publishing_id;
        if publisher.reference.is_some() && publisher.sequence.is_some_and(|stored| publishing_id <= stored) {
            outcome.confirm.push(publishing_id); // a duplicate: confirmed, not stored again
            continue;
        }
        match store(vhost, &publisher.stream, &message) {
            Ok(marks) => {
                outcome.marks.extend(marks);
                outcome.confirm.push(publishing_id);
                publisher.sequence = Some(publisher.sequence.map_or(publishing_id, |s| s.max(publishing_id)));
            }
            Err(code) => outcome.errors.push((publishing_id, code)),
        }
    }
    if !outcome.errors.is_empty() {
        let mut frame = BytesMut::new();
        response::publish_error(&mut frame, id, &outcome.errors);
        let _ = out.send(Outbound::Frames(frame));
    }
    if outcome.confirm.is_empty() {
        return;
    }
    let queue = vhost.queue(&publisher.stream).ok();
    let reference = publisher.reference.clone();
    let (out, sequence) = (out.clone(), publisher.sequence);
    tokio::spawn(async move {
        if !durable(&outcome.marks).await {
            let errors: Vec<_> = outcome.confirm.iter().map(|id| (*id, ResponseCode::InternalError)).collect();
            let mut frame = BytesMut::new();
            response::publish_error(&mut frame, id, &errors);
            let _ = out.send(Outbound::Frames(frame));
            return;
        }
        if let (Some(queue), Some(reference), Some(sequence)) = (queue, reference, sequence) {
            remember_sequence(&queue, &reference, sequence);
        }
        let mut frame = BytesMut::new();
        response::publish_confirm(&mut frame, id, &outcome.confirm);
        let _ = out.send(Outbound::Frames(frame));
    });
}

/// One entry into the stream (a message, or each message of a batch): the writes its
/// confirm waits for.
fn store(vhost: &Arc<VirtualHost>, stream: &str, message: &PublishedMessage) -> Result<Vec<DurableMark>, ResponseCode> {
    match &message.entry {
        PublishedEntry::Message(bytes) => store_one(vhost, stream, bytes),
        PublishedEntry::Batch { compression, records, uncompressed_bytes, data } => {
            let messages = sub_entry::messages(*compression, *records, *uncompressed_bytes, data.clone())
                .map_err(|_| ResponseCode::PreconditionFailed)?;
            let mut marks = Vec::new();
            for bytes in &messages {
                marks.extend(store_one(vhost, stream, bytes)?);
            }
            Ok(marks)
        }
    }
}

fn store_one(vhost: &Arc<VirtualHost>, stream: &str, bytes: &bytes::Bytes) -> Result<Vec<DurableMark>, ResponseCode> {
    let converted = amqp10::message_from_amqp10(bytes, stream).map_err(|_| ResponseCode::PreconditionFailed)?;
    let outcome = vhost.publish("", Arc::new(converted)).map_err(|_| ResponseCode::InternalError)?;
    if !outcome.routed {
        return Err(ResponseCode::StreamDoesNotExist);
    }
    if outcome.failure.is_some() || outcome.rejected {
        return Err(ResponseCode::InternalError);
    }
    Ok(outcome.marks)
}

async fn durable(marks: &[DurableMark]) -> bool {
    for mark in marks {
        if let Err(error) = mark.wait().await {
            tracing::warn!(%error, "a stream publish was not made durable");
            return false;
        }
    }
    true
}

/// Keeps `sequence` as the reference's highest confirmed publishing id.
fn remember_sequence(queue: &Queue, reference: &str, sequence: u64) {
    let Some(stream) = queue.stream() else { return };
    if let Err(error) = stream.store_named_offset(NamedOffset::Publisher, reference, sequence) {
        tracing::error!(stream = queue.name(), %error, "cannot store a publisher's sequence");
    }
}

/// The highest publishing id confirmed for `reference` on `queue`'s stream, if any.
pub fn stored_sequence(queue: &Queue, reference: &str) -> Option<u64> {
    queue.stream().and_then(|stream| stream.named_offset(NamedOffset::Publisher, reference))
}
