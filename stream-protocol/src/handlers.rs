//! The commands of an open connection, each checked against the user's permissions as
//! RabbitMQ's stream plugin checks them: configure on the stream to create or delete it,
//! write to publish, read to subscribe and to store or query offsets.

use crate::command::{key, ResponseCode};
use crate::connection::Connection;
use crate::outbound::Outbound;
use crate::publisher::{self, Publisher, MAX_REFERENCE_BYTES};
use crate::request::{OffsetSpecification, Request};
use crate::response::{self, Broker, StreamMetadata};
use crate::stream_arguments::{consumer_arguments, queue_arguments};
use crate::subscription::{Pending, Subscription, SubscriptionSink, PREFETCH_MESSAGES};
use amq_protocol::types::ShortString;
use std::collections::VecDeque;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use warren_delivery::access::{Access, Operation};
use warren_delivery::catalog::{self, DefinitionOp};
use warren_delivery::connections::StreamPublisher;
use warren_delivery::stream::NamedOffset;
use warren_delivery::{Consumer, ConsumerOptions, Queue, Session, VirtualHost};

/// Handles `request` on an open connection of `user` in `vhost`.
pub async fn handle(conn: &mut Connection, user: &str, vhost: &Arc<VirtualHost>, request: Request) {
    let broker = Arc::clone(&conn.broker);
    let allowed = move |access, stream: &str| -> bool {
        let operation = match access {
            Access::Configure => Operation::DeleteQueue { queue: stream },
            Access::Write => Operation::WriteQueue { queue: stream },
            Access::Read => Operation::Read { queue: stream },
        };
        broker.access().authorize(user, vhost.name(), &operation).is_ok()
    };
    match request {
        Request::DeclarePublisher { correlation_id, publisher_id, reference, stream } => {
            let code = if !allowed(Access::Write, &stream) {
                ResponseCode::AccessRefused
            } else {
                declare_publisher(conn, vhost, publisher_id, reference, stream)
            };
            conn.send(|out| response::plain(out, key::DECLARE_PUBLISHER, correlation_id, code));
        }
        Request::Publish { publisher_id, messages } => match conn.publishers.get_mut(&publisher_id) {
            Some(publisher) => publisher::publish(vhost, &conn.out, publisher_id, publisher, messages),
            None => {
                let errors: Vec<_> =
                    messages.iter().map(|m| (m.publishing_id, ResponseCode::PublisherDoesNotExist)).collect();
                conn.send(|out| response::publish_error(out, publisher_id, &errors));
            }
        },
        Request::QueryPublisherSequence { correlation_id, reference, stream } => {
            let (code, sequence) = match stream_queue(vhost, &stream) {
                Some(queue) if allowed(Access::Read, &stream) || allowed(Access::Write, &stream) => {
                    // 0 when nothing was stored, as RabbitMQ answers.
                    (ResponseCode::Ok, publisher::stored_sequence(&queue, &reference).unwrap_or(0))
                }
                Some(_) => (ResponseCode::AccessRefused, 0),
                None => (ResponseCode::StreamDoesNotExist, 0),
            };
            conn.send(|out| response::query_publisher_sequence(out, correlation_id, code, sequence));
        }
        Request::DeletePublisher { correlation_id, publisher_id } => {
            let code = match conn.publishers.remove(&publisher_id) {
                Some(_) => {
                    conn.registered().info().publisher_deleted(publisher_id);
                    ResponseCode::Ok
                }
                None => ResponseCode::PublisherDoesNotExist,
            };
            conn.send(|out| response::plain(out, key::DELETE_PUBLISHER, correlation_id, code));
        }
        Request::Subscribe { correlation_id, subscription_id, stream, offset, credit, properties } => {
            let started = if !allowed(Access::Read, &stream) {
                Err(ResponseCode::AccessRefused)
            } else {
                subscribe(conn, vhost, subscription_id, &stream, offset, credit, &properties).await
            };
            let code = started.as_ref().err().copied().unwrap_or(ResponseCode::Ok);
            conn.send(|out| response::plain(out, key::SUBSCRIBE, correlation_id, code));
            if let Ok((queue, consumer)) = started {
                let _ = conn.out.send(Outbound::Started(subscription_id));
                // Only now, the answer on its way: what the stream holds flows.
                queue.start_deliveries(&consumer);
            }
        }
        Request::Credit { subscription_id, credit } => match conn.subscriptions.get(&subscription_id) {
            Some(subscription) => {
                subscription.add_credit(credit);
                let _ = conn.out.send(Outbound::Credited(subscription_id));
            }
            None => {
                conn.send(|out| response::credit_failed(out, ResponseCode::SubscriptionIdDoesNotExist, subscription_id))
            }
        },
        Request::Unsubscribe { correlation_id, subscription_id } => {
            let code = match conn.subscriptions.remove(&subscription_id) {
                Some(subscription) => {
                    subscription.session.close();
                    let _ = conn.out.send(Outbound::Unsubscribed(subscription_id));
                    ResponseCode::Ok
                }
                None => ResponseCode::SubscriptionIdDoesNotExist,
            };
            conn.send(|out| response::plain(out, key::UNSUBSCRIBE, correlation_id, code));
        }
        Request::StoreOffset { reference, stream, offset } => {
            // No answer, as in RabbitMQ: a refused store is only logged.
            if let Some(queue) = stream_queue(vhost, &stream).filter(|_| allowed(Access::Read, &stream)) {
                store_offset(&queue, &reference, offset);
            }
        }
        Request::QueryOffset { correlation_id, reference, stream } => {
            let (code, offset) = match stream_queue(vhost, &stream) {
                Some(_) if !allowed(Access::Read, &stream) => (ResponseCode::AccessRefused, 0),
                Some(queue) => match queue.stream().and_then(|s| s.named_offset(NamedOffset::Consumer, &reference)) {
                    Some(offset) => (ResponseCode::Ok, offset),
                    None => (ResponseCode::NoOffset, 0),
                },
                None => (ResponseCode::StreamDoesNotExist, 0),
            };
            conn.send(|out| response::query_offset(out, correlation_id, code, offset));
        }
        Request::Create { correlation_id, stream, arguments } => {
            let code = if !allowed(Access::Configure, &stream) {
                ResponseCode::AccessRefused
            } else {
                create(vhost, &stream, &arguments).await
            };
            conn.send(|out| response::plain(out, key::CREATE, correlation_id, code));
        }
        Request::Delete { correlation_id, stream } => {
            let code = if !allowed(Access::Configure, &stream) {
                ResponseCode::AccessRefused
            } else {
                delete(vhost, &stream).await
            };
            conn.send(|out| response::plain(out, key::DELETE, correlation_id, code));
        }
        Request::Metadata { correlation_id, streams } => {
            let broker = Broker {
                reference: 0,
                host: conn.settings.advertised_host.clone(),
                port: u32::from(conn.settings.advertised_port),
            };
            let metadata: Vec<_> = streams.into_iter().map(|stream| stream_metadata(vhost, stream)).collect();
            conn.send(|out| response::metadata(out, correlation_id, &[broker], &metadata));
        }
        Request::StreamStats { correlation_id, stream } => {
            let (code, stats) = match stream_queue(vhost, &stream) {
                Some(_) if !allowed(Access::Read, &stream) => (ResponseCode::AccessRefused, Vec::new()),
                Some(queue) => (ResponseCode::Ok, stats(&queue)),
                None => (ResponseCode::StreamDoesNotExist, Vec::new()),
            };
            conn.send(|out| response::stream_stats(out, correlation_id, code, &stats));
        }
        Request::Route { correlation_id, .. } => {
            conn.send(|out| response::streams(out, key::ROUTE, correlation_id, ResponseCode::StreamDoesNotExist, &[]));
        }
        Request::Partitions { correlation_id, .. } => {
            let code = ResponseCode::StreamDoesNotExist;
            conn.send(|out| response::streams(out, key::PARTITIONS, correlation_id, code, &[]));
        }
        Request::CreateSuperStream { correlation_id, .. } => {
            let code = ResponseCode::PreconditionFailed;
            conn.send(|out| response::plain(out, key::CREATE_SUPER_STREAM, correlation_id, code));
        }
        Request::DeleteSuperStream { correlation_id, .. } => {
            let code = ResponseCode::StreamDoesNotExist;
            conn.send(|out| response::plain(out, key::DELETE_SUPER_STREAM, correlation_id, code));
        }
        // A second handshake command, or an answer to nothing asked: ignored, as RabbitMQ does.
        _ => {}
    }
}

/// The queue named `stream` if it is a stream.
pub(crate) fn stream_queue(vhost: &VirtualHost, stream: &str) -> Option<Arc<Queue>> {
    vhost.queue(stream).ok().filter(|queue| queue.stream().is_some())
}

fn declare_publisher(
    conn: &mut Connection,
    vhost: &VirtualHost,
    id: u8,
    reference: Option<String>,
    stream: String,
) -> ResponseCode {
    // Ids are a byte: a connection has at most 256 publishers, and as many subscriptions.
    if conn.publishers.contains_key(&id) {
        return ResponseCode::PreconditionFailed;
    }
    let reference = reference.filter(|r| !r.is_empty());
    if reference.as_ref().is_some_and(|r| r.len() > MAX_REFERENCE_BYTES) {
        return ResponseCode::PreconditionFailed;
    }
    let Some(queue) = stream_queue(vhost, &stream) else { return ResponseCode::StreamDoesNotExist };
    let sequence = reference.as_deref().and_then(|r| publisher::stored_sequence(&queue, r));
    let shown = StreamPublisher { id, stream: stream.clone(), reference: reference.clone() };
    conn.registered().info().publisher_declared(shown);
    conn.publishers.insert(id, Publisher { stream, queue, reference, sequence });
    ResponseCode::Ok
}

async fn subscribe(
    conn: &mut Connection,
    vhost: &Arc<VirtualHost>,
    id: u8,
    stream: &str,
    offset: OffsetSpecification,
    credit: u16,
    properties: &[(String, String)],
) -> Result<(Arc<Queue>, Arc<Consumer>), ResponseCode> {
    if conn.subscriptions.contains_key(&id) {
        return Err(ResponseCode::SubscriptionIdAlreadyExists);
    }
    let queue = stream_queue(vhost, stream).ok_or(ResponseCode::StreamDoesNotExist)?;
    let arguments = consumer_arguments(offset, properties).map_err(|_| ResponseCode::PreconditionFailed)?;
    let credit_left = Arc::new(AtomicU32::new(u32::from(credit)));
    let sink = SubscriptionSink { id, out: conn.out.clone(), credit: Arc::clone(&credit_left) };
    let session = Session::new(Arc::clone(vhost), Arc::new(sink));
    session.set_prefetch(PREFETCH_MESSAGES, false);
    let subscription =
        Arc::new(Subscription { id, stream: stream.to_string(), credit: credit_left, session: Arc::clone(&session) });
    let pending = Pending {
        subscription: Arc::clone(&subscription),
        deliver_version: conn.deliver_version,
        deliveries: VecDeque::new(),
        started: false,
        scratch: Vec::new(),
    };
    let _ = conn.out.send(Outbound::Subscribed(Box::new(pending)));
    let options = ConsumerOptions { no_ack: false, exclusive: false, arguments };
    let tag = ShortString::from(format!("stream-subscription-{id}"));
    match session.consume(Arc::clone(&queue), tag, options).wait().await {
        Ok(consumer) => {
            conn.subscriptions.insert(id, subscription);
            Ok((queue, consumer))
        }
        Err(error) => {
            tracing::info!(stream, %error, "a stream subscription was refused");
            session.close();
            let _ = conn.out.send(Outbound::Unsubscribed(id));
            Err(ResponseCode::PreconditionFailed)
        }
    }
}

fn store_offset(queue: &Queue, reference: &str, offset: u64) {
    let Some(stream) = queue.stream() else { return };
    if reference.is_empty() || reference.len() > MAX_REFERENCE_BYTES {
        return;
    }
    if let Err(error) = stream.store_named_offset(NamedOffset::Consumer, reference, offset) {
        tracing::error!(stream = queue.name(), %error, "cannot store a consumer's offset");
    }
}

async fn create(vhost: &Arc<VirtualHost>, stream: &str, arguments: &[(String, String)]) -> ResponseCode {
    if vhost.queue(stream).is_ok() {
        return ResponseCode::StreamAlreadyExists;
    }
    if VirtualHost::check_queue_name(stream).is_err() || stream.is_empty() {
        return ResponseCode::PreconditionFailed;
    }
    let Ok(arguments) = queue_arguments(arguments) else { return ResponseCode::PreconditionFailed };
    let op = DefinitionOp::DeclareQueue {
        name: stream.to_string(),
        durable: true,
        auto_delete: false,
        arguments,
        members: None,
    };
    match catalog::change(vhost, op).await {
        Ok(_) => ResponseCode::Ok,
        Err(error) => {
            tracing::info!(stream, %error, "a stream was not created");
            ResponseCode::PreconditionFailed
        }
    }
}

async fn delete(vhost: &Arc<VirtualHost>, stream: &str) -> ResponseCode {
    if stream_queue(vhost, stream).is_none() {
        return ResponseCode::StreamDoesNotExist;
    }
    let op = DefinitionOp::DeleteQueue { name: stream.to_string(), if_unused: false, if_empty: false };
    match catalog::change(vhost, op).await {
        Ok(_) => ResponseCode::Ok,
        Err(error) => {
            tracing::info!(stream, %error, "a stream was not deleted");
            ResponseCode::InternalError
        }
    }
}

fn stream_metadata(vhost: &VirtualHost, stream: String) -> StreamMetadata {
    match stream_queue(vhost, &stream) {
        Some(_) => StreamMetadata { stream, code: ResponseCode::Ok, leader: 0, replicas: Vec::new() },
        None => {
            StreamMetadata { stream, code: ResponseCode::StreamDoesNotExist, leader: u16::MAX, replicas: Vec::new() }
        }
    }
}

/// StreamStats' figures, as RabbitMQ names them: the first offset held, the newest and the
/// newest committed (-1 for an empty stream). Warren's log has no chunks of its own: each
/// message is its own chunk id, and what a log holds is committed.
fn stats(queue: &Queue) -> Vec<(&'static str, i64)> {
    let Some(stream) = queue.stream() else { return Vec::new() };
    let (first, next) = stream.bounds();
    let last = if next == 0 { -1 } else { next as i64 - 1 };
    vec![("first_chunk_id", first as i64), ("last_chunk_id", last), ("committed_chunk_id", last)]
}
