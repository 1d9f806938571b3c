//! One AMQP channel: the methods of classes exchange, queue, basic, tx and confirm (exchange
//! and queue in `definitions`).
//!
//! The channel translates methods into calls on the broker core and queues the replies. The
//! connection owns the channels, routes frames to them and turns the errors they return into
//! `channel.close` or `connection.close` with the reply code the error carries.

mod definitions;
#[cfg(test)]
mod tests;

use crate::connection_context::ConnectionContext;
use crate::content::PendingContent;
use crate::outbox::{ChannelSink, LateReplies, Outbound};
use crate::pending_reply::{Answer, PendingReply};
use crate::publish::{Confirms, Transaction, TxOp};
use amq_protocol::protocol::{basic, confirm, tx, AMQPClass};
use amq_protocol::types::ShortString;
use bytes::Bytes;
use rand::distributions::{Alphanumeric, DistString};
use std::sync::Arc;
use warren_delivery::access::Operation;
use warren_delivery::direct_reply_to::PSEUDO_QUEUE;
use warren_delivery::exchange::Destination;
use warren_delivery::node_counters::QueueTypeCounters;
use warren_delivery::session::ChannelStats;
use warren_delivery::{
    BrokerError, BrokerResult, Consumer, ConsumerOptions, GetResult, Message, Reply, ReplyCode, Session,
};

/// Length of the random part of a server-generated consumer tag.
const GENERATED_TAG_CHARS: usize = 22;

/// An open channel.
#[derive(Debug)]
pub struct Channel {
    id: u16,
    session: Arc<Session>,
    content: Option<PendingContent>,
    /// The last queue declared, used when a method names the queue "".
    last_queue: Option<String>,
    confirms: Option<Confirms>,
    transaction: Option<Transaction>,
    /// Confirms that wait for the disk.
    late_replies: LateReplies,
    /// The reply of the last method, if it waits for something (see `pending_reply`).
    pending: Option<PendingReply>,
    /// The last exchange this channel was allowed to publish to.
    publish_grant: crate::authorization::PublishGrant,
}

fn short(s: impl Into<String>) -> ShortString {
    ShortString::try_new(s.into()).unwrap_or_default()
}

/// `basic.recover` (or recover-async) with requeue=false would redeliver to the same consumer
/// what it was given; RabbitMQ never implemented it and closes the connection with 540.
fn refuse_recover_without_requeue(requeue: bool) -> BrokerResult<()> {
    if requeue {
        return Ok(());
    }
    Err(BrokerError::new(ReplyCode::NotImplemented, "requeue=false: basic.recover redelivers by requeueing only"))
}

impl Channel {
    /// Opens channel `id` on a connection.
    pub fn open(id: u16, ctx: &ConnectionContext) -> Self {
        let sink = Arc::new(ChannelSink::new(id, ctx.outbox.clone()));
        Channel {
            id,
            session: Session::new(Arc::clone(&ctx.vhost), sink),
            content: None,
            last_queue: None,
            confirms: None,
            transaction: None,
            late_replies: LateReplies::new(ctx.outbox.clone()),
            pending: None,
            publish_grant: Default::default(),
        }
    }

    /// Whether a publish's header or body frames are expected next.
    pub fn expects_content(&self) -> bool {
        self.content.is_some()
    }

    /// The channel is going away: confirms already decided go out, those still waiting for
    /// the disk never will (the caller queues close or close-ok next); consumers are cancelled
    /// and unacked deliveries requeued.
    pub fn close(&mut self) {
        self.flush_confirms();
        self.late_replies.close();
        self.session.close();
    }

    /// The client caught up with what was sent: held-back deliveries resume.
    pub fn resume(&self) {
        self.session.resume();
    }

    /// `channel.flow`: pauses or resumes deliveries on this channel.
    pub fn set_flow(&self, active: bool) {
        self.session.set_flow(active);
    }

    fn reply(&self, ctx: &ConnectionContext, method: AMQPClass) {
        ctx.outbox.method(self.id, method);
    }

    /// The broker-side state of the channel.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// The reply of the method just handled, if it waits for something.
    pub fn take_pending(&mut self) -> Option<PendingReply> {
        self.pending.take()
    }

    /// Sends any confirms collected while processing a batch of frames.
    pub fn flush_confirms(&mut self) {
        if let Some(confirms) = &mut self.confirms {
            confirms.flush();
        }
    }

    /// Handles a method of class exchange, queue, basic, tx or confirm.
    pub fn handle_method(&mut self, ctx: &ConnectionContext, mut method: AMQPClass) -> BrokerResult<()> {
        let server_named = definitions::name_server_named_queue(&mut method);
        let last_queue = &self.last_queue;
        let queue_name = |name: &str| match (name, last_queue) {
            ("", Some(last)) => last.clone(),
            _ => name.to_string(),
        };
        crate::authorization::check(ctx, &method, queue_name, &mut self.publish_grant)?;
        match method {
            AMQPClass::Exchange(m) => self.exchange_method(ctx, m),
            AMQPClass::Queue(m) => self.queue_method(ctx, m, server_named),
            AMQPClass::Basic(m) => self.basic_method(ctx, m),
            AMQPClass::Tx(m) => self.tx_method(ctx, m),
            AMQPClass::Confirm(confirm::AMQPMethod::Select(select)) => self.confirm_select(ctx, select.nowait),
            other => Err(BrokerError::command_invalid(format!("method {other:?} is not valid on a channel"))),
        }
    }

    fn queue_name(&self, name: &ShortString) -> BrokerResult<String> {
        if !name.as_str().is_empty() {
            return Ok(name.to_string());
        }
        self.last_queue.clone().ok_or_else(|| BrokerError::not_found("no previously declared queue on this channel"))
    }

    /// Looks up a queue this connection may use (404, 405).
    fn usable_queue(&self, ctx: &ConnectionContext, name: &ShortString) -> BrokerResult<Arc<warren_delivery::Queue>> {
        let queue = ctx.vhost.queue(&self.queue_name(name)?)?;
        queue.check_owner(ctx.id)?;
        Ok(queue)
    }

    fn basic_method(&mut self, ctx: &ConnectionContext, method: basic::AMQPMethod) -> BrokerResult<()> {
        match method {
            basic::AMQPMethod::Publish(publish) => {
                if publish.immediate {
                    return Err(BrokerError::new(ReplyCode::NotImplemented, "immediate=true"));
                }
                self.content = Some(PendingContent::new(publish));
                Ok(())
            }
            basic::AMQPMethod::Qos(qos) => {
                self.session.set_prefetch(qos.prefetch_count, qos.global);
                self.reply(ctx, AMQPClass::Basic(basic::AMQPMethod::QosOk(basic::QosOk {})));
                Ok(())
            }
            basic::AMQPMethod::Consume(consume) => self.consume(ctx, consume),
            basic::AMQPMethod::Cancel(cancel) => {
                self.session.cancel(cancel.consumer_tag.as_str());
                if !cancel.nowait {
                    let ok = basic::CancelOk { consumer_tag: cancel.consumer_tag };
                    self.reply(ctx, AMQPClass::Basic(basic::AMQPMethod::CancelOk(ok)));
                }
                Ok(())
            }
            basic::AMQPMethod::Get(get) => self.get(ctx, get),
            basic::AMQPMethod::Ack(ack) => self.settle(TxOp::Ack { tag: ack.delivery_tag, multiple: ack.multiple }),
            basic::AMQPMethod::Nack(nack) => {
                self.settle(TxOp::Reject { tag: nack.delivery_tag, multiple: nack.multiple, requeue: nack.requeue })
            }
            basic::AMQPMethod::Reject(reject) => {
                self.settle(TxOp::Reject { tag: reject.delivery_tag, multiple: false, requeue: reject.requeue })
            }
            basic::AMQPMethod::Recover(recover) => {
                refuse_recover_without_requeue(recover.requeue)?;
                // recover-ok goes first: clients drop what they hold when it arrives, so the
                // redeliveries must come after it.
                self.reply(ctx, AMQPClass::Basic(basic::AMQPMethod::RecoverOk(basic::RecoverOk {})));
                self.session.recover();
                Ok(())
            }
            basic::AMQPMethod::RecoverAsync(recover) => {
                refuse_recover_without_requeue(recover.requeue)?;
                self.session.recover();
                Ok(())
            }
            // The client's answer to a cancel the broker sent: nothing more to do.
            basic::AMQPMethod::CancelOk(_) => Ok(()),
            other => Err(BrokerError::command_invalid(format!("{other:?} is sent by servers, not clients"))),
        }
    }

    fn consume(&mut self, ctx: &ConnectionContext, consume: basic::Consume) -> BrokerResult<()> {
        let tag = if consume.consumer_tag.as_str().is_empty() {
            let random = Alphanumeric.sample_string(&mut rand::thread_rng(), GENERATED_TAG_CHARS);
            short(format!("amq.ctag-{random}"))
        } else {
            consume.consumer_tag
        };
        if consume.queue.as_str() == PSEUDO_QUEUE {
            self.session.consume_replies(tag.clone(), consume.no_ack, ctx.id, self.id)?;
            if !consume.nowait {
                let ok = basic::ConsumeOk { consumer_tag: tag };
                self.reply(ctx, AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(ok)));
            }
            return Ok(());
        }
        let consume_ok = (!consume.nowait)
            .then(|| AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(basic::ConsumeOk { consumer_tag: tag.clone() })));
        let options =
            ConsumerOptions { no_ack: consume.no_ack, exclusive: consume.exclusive, arguments: consume.arguments };
        let started = match self.super_stream_partitions(ctx, &consume.queue)? {
            Some(partitions) => self.session.consume_partitions(partitions, tag, options),
            None => {
                let queue = self.usable_queue(ctx, &consume.queue)?;
                self.session.consume(queue, tag, options).map(|started| started.map(|consumer| vec![consumer]))
            }
        };
        self.start_consumers(ctx, started, consume_ok)
    }

    /// Sends consume-ok once the consumers started (a super stream's are one per partition),
    /// then lets their deliveries start.
    fn start_consumers(
        &mut self,
        ctx: &ConnectionContext,
        started: Reply<BrokerResult<Vec<Arc<Consumer>>>>,
        consume_ok: Option<AMQPClass>,
    ) -> BrokerResult<()> {
        match started {
            Reply::Now(consumers) => {
                let consumers = consumers?;
                if let Some(ok) = consume_ok {
                    self.reply(ctx, ok);
                }
                // Only now, with consume-ok queued ahead of them, may deliveries start.
                for consumer in &consumers {
                    consumer.queue().start_deliveries(consumer);
                }
            }
            // A queue of another node: consume-ok once its home took the consumer (a refusal
            // there closes this channel, as it would here). It goes out from the waiting reply
            // itself, so that the deliveries it lets start follow it.
            Reply::Later(started) => {
                let (channel, late_replies) = (self.id, self.late_replies.clone());
                self.pending = Some(PendingReply::new(channel, async move {
                    let consumers = started.await?;
                    if let Some(ok) = consume_ok {
                        late_replies.send(Outbound::Method(channel, ok));
                    }
                    for consumer in &consumers {
                        consumer.queue().start_deliveries(consumer);
                    }
                    Ok(Answer::Nothing)
                }));
            }
        }
        Ok(())
    }

    /// The partitions of super stream `name`, when `name` is one and no queue has that name:
    /// `basic.consume` on a super stream reads all its partitions (each needs read access).
    fn super_stream_partitions(
        &self,
        ctx: &ConnectionContext,
        name: &ShortString,
    ) -> BrokerResult<Option<Vec<Arc<warren_delivery::Queue>>>> {
        if name.as_str().is_empty() || ctx.vhost.queue(name.as_str()).is_ok() {
            return Ok(None);
        }
        let Some(partitions) = ctx.vhost.exchange(name.as_str()).ok().and_then(|e| e.partitions()) else {
            return Ok(None);
        };
        let mut queues = Vec::with_capacity(partitions.len());
        for partition in partitions {
            let Destination::Queue(queue) = partition else { continue };
            ctx.authorize(&Operation::Read { queue: &queue })?;
            queues.push(self.usable_queue(ctx, &ShortString::from(queue.to_string()))?);
        }
        if queues.is_empty() {
            return Err(BrokerError::not_found(format!("super stream '{name}' has no partitions")));
        }
        Ok(Some(queues))
    }

    fn get(&mut self, ctx: &ConnectionContext, get: basic::Get) -> BrokerResult<()> {
        let queue = self.usable_queue(ctx, &get.queue)?;
        let (channel, frame_max) = (self.id, ctx.frame_max);
        let counters = GetCounters { node: queue.stats().of_type(), channel: Arc::clone(self.session.stats()) };
        match queue.get(&self.session, get.no_ack) {
            Reply::Now(got) => ctx.outbox.send(Outbound::Frames(get_reply(channel, got?, frame_max, &counters))),
            Reply::Later(got) => {
                self.pending = Some(PendingReply::new(channel, async move {
                    got.await.map(|got| Answer::Frames(get_reply(channel, got, frame_max, &counters)))
                }));
            }
        }
        Ok(())
    }

    fn send_content(&self, ctx: &ConnectionContext, method: AMQPClass, message: &Message) {
        ctx.outbox.send(Outbound::Frames(method_with_content(self.id, method, message, ctx.frame_max)));
    }

    fn settle(&mut self, op: TxOp) -> BrokerResult<()> {
        match &mut self.transaction {
            Some(transaction) => {
                transaction.push(op);
                Ok(())
            }
            None => self.apply_settlement(op),
        }
    }

    fn apply_settlement(&self, op: TxOp) -> BrokerResult<()> {
        match op {
            TxOp::Ack { tag, multiple } => self.session.ack(tag, multiple),
            TxOp::Reject { tag, multiple, requeue } => self.session.reject(tag, multiple, requeue),
            TxOp::Publish { .. } => Ok(()),
        }
    }

    /// Takes a content header frame.
    pub fn handle_header(&mut self, ctx: &ConnectionContext, payload: Bytes) -> BrokerResult<()> {
        let content = self.content.as_mut().filter(|c| c.awaits_header()).ok_or_else(|| {
            BrokerError::new(ReplyCode::UnexpectedFrame, "content header frame without basic.publish")
        })?;
        content.header(payload, ctx.max_message_bytes)?;
        self.publish_if_complete(ctx)
    }

    /// Takes a content body frame.
    pub fn handle_body(&mut self, ctx: &ConnectionContext, payload: Bytes) -> BrokerResult<()> {
        let content = self.content.as_mut().filter(|c| !c.awaits_header()).ok_or_else(|| {
            BrokerError::new(ReplyCode::UnexpectedFrame, "content body frame without a content header")
        })?;
        content.body(payload)?;
        self.publish_if_complete(ctx)
    }

    fn publish_if_complete(&mut self, ctx: &ConnectionContext) -> BrokerResult<()> {
        if !self.content.as_ref().is_some_and(PendingContent::is_complete) {
            return Ok(());
        }
        let Some(content) = self.content.take() else { return Ok(()) };
        let (mandatory, message) = content.finish();
        warren_delivery::access::check_user_id(&message.properties, &ctx.user)?;
        let message = self.with_reply_address(message)?;
        let op = TxOp::Publish { mandatory, message: Arc::new(message) };
        match &mut self.transaction {
            Some(transaction) => {
                transaction.push(op);
                Ok(())
            }
            None => self.publish(ctx, op),
        }
    }

    /// A request published with `reply_to: amq.rabbitmq.reply-to` gets this channel's reply
    /// address instead; without a reply consumer on the channel that is 406, as in RabbitMQ.
    fn with_reply_address(&self, mut message: Message) -> BrokerResult<Message> {
        if message.properties.reply_to() != Some(PSEUDO_QUEUE.as_bytes()) {
            return Ok(message);
        }
        let address = self
            .session
            .reply_address()
            .ok_or_else(|| BrokerError::precondition_failed("fast reply consumer does not exist"))?;
        message.properties = message
            .properties
            .with_reply_to(&address)
            .ok_or_else(|| BrokerError::new(ReplyCode::InternalError, "cannot rewrite reply_to"))?;
        Ok(message)
    }

    /// Counts a publish received, on the node and on the channel.
    fn count_received(&self) {
        use warren_delivery::node_counters::{MESSAGES_RECEIVED, MESSAGES_RECEIVED_CONFIRM};
        MESSAGES_RECEIVED.add();
        if self.confirms.is_some() {
            MESSAGES_RECEIVED_CONFIRM.add();
        }
        self.session.stats().published.add();
    }

    fn publish(&mut self, ctx: &ConnectionContext, op: TxOp) -> BrokerResult<()> {
        let TxOp::Publish { mandatory, message } = op else { return Ok(()) };
        self.count_received();
        let outcome = ctx.vhost.publish(message.exchange.as_str(), Arc::clone(&message))?;
        let sequence = self.confirms.as_mut().map(Confirms::next_sequence);
        count_fate(self.session.stats(), outcome.routed, mandatory);
        if !outcome.routed && mandatory {
            let ret = basic::Return {
                reply_code: ReplyCode::NoRoute.code(),
                reply_text: short(ReplyCode::NoRoute.name()),
                exchange: message.exchange.clone(),
                routing_key: message.routing_key.clone(),
            };
            self.send_content(ctx, AMQPClass::Basic(basic::AMQPMethod::Return(ret)), &message);
        }
        for mark in outcome.marks {
            match (&mut self.confirms, &mut self.transaction) {
                (Some(confirms), _) => confirms.wait_for(mark),
                (None, Some(transaction)) => transaction.wait_for(mark),
                (None, None) => {}
            }
        }
        if let (Some(confirms), Some(sequence)) = (&mut self.confirms, sequence) {
            // A store failure, or a queue at its limit with x-overflow reject-publish: nack.
            confirms.settle(sequence, outcome.failure.is_none() && !outcome.rejected);
            return Ok(());
        }
        // Without confirms the publisher learns of a failed store by its channel closing (506,
        // a channel error): its other channels, consumers that could free the disk among
        // them, carry on.
        match outcome.failure {
            Some(error) => Err(BrokerError::new(ReplyCode::ResourceError, format!("cannot store message: {error}"))),
            None => Ok(()),
        }
    }

    fn confirm_select(&mut self, ctx: &ConnectionContext, nowait: bool) -> BrokerResult<()> {
        if self.transaction.is_some() {
            return Err(BrokerError::precondition_failed("cannot switch from tx to confirm mode"));
        }
        if self.confirms.is_none() {
            self.confirms = Some(Confirms::new(self.id, self.late_replies.clone(), Arc::clone(self.session.stats())));
        }
        if !nowait {
            self.reply(ctx, AMQPClass::Confirm(confirm::AMQPMethod::SelectOk(confirm::SelectOk {})));
        }
        Ok(())
    }

    fn tx_method(&mut self, ctx: &ConnectionContext, method: tx::AMQPMethod) -> BrokerResult<()> {
        let ok = match method {
            tx::AMQPMethod::Select(_) => {
                if self.confirms.is_some() {
                    return Err(BrokerError::precondition_failed("cannot switch from confirm to tx mode"));
                }
                self.transaction.get_or_insert_with(Transaction::default);
                tx::AMQPMethod::SelectOk(tx::SelectOk {})
            }
            tx::AMQPMethod::Commit(_) => {
                let ops = self.transaction_mut()?.take();
                for op in ops {
                    match op {
                        TxOp::Publish { .. } => self.publish(ctx, op)?,
                        settlement => self.apply_settlement(settlement)?,
                    }
                }
                let marks = self.transaction_mut()?.take_marks();
                if !marks.is_empty() {
                    // commit-ok promises the published messages are safe: it waits for the fsync,
                    // and the channel's next methods wait for it.
                    self.pending = Some(PendingReply::new(self.id, async move {
                        if crate::publish::wait_durable(&marks).await {
                            Ok(Answer::Method(AMQPClass::Tx(tx::AMQPMethod::CommitOk(tx::CommitOk {}))))
                        } else {
                            Err(BrokerError::new(
                                ReplyCode::InternalError,
                                "cannot make the transaction's messages durable",
                            ))
                        }
                    }));
                    return Ok(());
                }
                tx::AMQPMethod::CommitOk(tx::CommitOk {})
            }
            tx::AMQPMethod::Rollback(_) => {
                self.transaction_mut()?.take();
                tx::AMQPMethod::RollbackOk(tx::RollbackOk {})
            }
            other => return Err(BrokerError::command_invalid(format!("{other:?} is sent by servers, not clients"))),
        };
        self.reply(ctx, AMQPClass::Tx(ok));
        Ok(())
    }

    fn transaction_mut(&mut self) -> BrokerResult<&mut Transaction> {
        self.transaction.as_mut().ok_or_else(|| BrokerError::precondition_failed("channel is not transactional"))
    }
}

/// Where a `basic.get` that finds its queue empty is counted.
struct GetCounters {
    node: &'static QueueTypeCounters,
    channel: Arc<ChannelStats>,
}

/// `basic.get-ok` with the message, or `basic.get-empty`, as frames.
fn get_reply(channel: u16, got: Option<GetResult>, frame_max: u32, counters: &GetCounters) -> Bytes {
    let mut out = bytes::BytesMut::new();
    let Some(got) = got else {
        counters.node.get_empty.add();
        counters.channel.get_empty.add();
        let empty = AMQPClass::Basic(basic::AMQPMethod::GetEmpty(basic::GetEmpty {}));
        crate::frame::put_method(&mut out, channel, empty);
        return out.freeze();
    };
    let message = &got.message;
    let ok = basic::GetOk {
        delivery_tag: got.delivery_tag,
        redelivered: got.redelivered,
        exchange: message.exchange.clone(),
        routing_key: message.routing_key.clone(),
        message_count: got.message_count,
    };
    method_with_content(channel, AMQPClass::Basic(basic::AMQPMethod::GetOk(ok)), message, frame_max)
}

/// A method followed by a message's header and body frames.
fn method_with_content(channel: u16, method: AMQPClass, message: &Message, frame_max: u32) -> Bytes {
    let mut out = bytes::BytesMut::new();
    crate::frame::put_method(&mut out, channel, method);
    crate::frame::put_content(&mut out, channel, message.properties.raw(), &message.body, frame_max);
    out.freeze()
}

/// Counts what became of a publish, on the node and on its channel: routed, or unroutable
/// and returned (mandatory) or dropped.
fn count_fate(channel: &ChannelStats, routed: bool, mandatory: bool) {
    use warren_delivery::node_counters::{MESSAGES_ROUTED, MESSAGES_UNROUTABLE_DROPPED, MESSAGES_UNROUTABLE_RETURNED};
    match (routed, mandatory) {
        (true, _) => MESSAGES_ROUTED.add(),
        (false, true) => {
            MESSAGES_UNROUTABLE_RETURNED.add();
            channel.unroutable_returned.add();
        }
        (false, false) => {
            MESSAGES_UNROUTABLE_DROPPED.add();
            channel.unroutable_dropped.add();
        }
    }
}
