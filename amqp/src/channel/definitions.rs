//! The methods of classes exchange and queue: declares, deletes, binds and purges, made here
//! or, in a cluster, through the metadata group (the channel's reply then waits for it).

use super::{short, Channel, ConnectionContext};
use crate::pending_reply::{Answer, PendingReply};
use amq_protocol::protocol::{exchange, queue, AMQPClass};
use amq_protocol::types::{FieldTable, ShortString};
use std::sync::Arc;
use warren_delivery::exchange::{Binding, Destination, ExchangeDefinition};
use warren_delivery::metadata::{DefinitionOp, MetaOutcome};
use warren_delivery::vhost::DeleteCondition;
use warren_delivery::{direct_reply_to, BrokerError, BrokerResult, QueueDefinition, Reply, ReplyCode, VirtualHost};

impl Channel {
    pub(super) fn exchange_method(
        &mut self,
        ctx: &ConnectionContext,
        method: exchange::AMQPMethod,
    ) -> BrokerResult<()> {
        let vhost = &ctx.vhost;
        let (nowait, ok) = match method {
            exchange::AMQPMethod::Declare(d) if !d.passive && ctx.vhost.metadata().is_some() => {
                let op = DefinitionOp::DeclareExchange {
                    name: d.exchange.to_string(),
                    kind: d.kind.to_string(),
                    durable: d.durable,
                    auto_delete: d.auto_delete,
                    internal: d.internal,
                    arguments: d.arguments,
                };
                let ok = |_| AMQPClass::Exchange(exchange::AMQPMethod::DeclareOk(exchange::DeclareOk {}));
                return self.change_definitions(ctx, op, d.nowait, ok);
            }
            exchange::AMQPMethod::Declare(d) => {
                if d.passive {
                    vhost.declare_exchange_passive(d.exchange.as_str())?;
                } else {
                    vhost.declare_exchange(ExchangeDefinition::declared(
                        d.exchange.as_str(),
                        d.kind.as_str(),
                        d.durable,
                        d.auto_delete,
                        d.internal,
                        d.arguments,
                    )?)?;
                }
                (d.nowait, exchange::AMQPMethod::DeclareOk(exchange::DeclareOk {}))
            }
            exchange::AMQPMethod::Delete(d) if ctx.vhost.metadata().is_some() => {
                let op = DefinitionOp::DeleteExchange { name: d.exchange.to_string(), if_unused: d.if_unused };
                let ok = |_| AMQPClass::Exchange(exchange::AMQPMethod::DeleteOk(exchange::DeleteOk {}));
                return self.change_definitions(ctx, op, d.nowait, ok);
            }
            exchange::AMQPMethod::Delete(d) => {
                vhost.delete_exchange(d.exchange.as_str(), d.if_unused)?;
                (d.nowait, exchange::AMQPMethod::DeleteOk(exchange::DeleteOk {}))
            }
            exchange::AMQPMethod::Bind(b) if ctx.vhost.metadata().is_some() => {
                let op = DefinitionOp::Bind {
                    source: b.source.to_string(),
                    destination: b.destination.to_string(),
                    to_exchange: true,
                    routing_key: b.routing_key.to_string(),
                    arguments: b.arguments,
                };
                let ok = |_| AMQPClass::Exchange(exchange::AMQPMethod::BindOk(exchange::BindOk {}));
                return self.change_definitions(ctx, op, b.nowait, ok);
            }
            exchange::AMQPMethod::Bind(b) => {
                vhost.bind(b.source.as_str(), exchange_binding(b.destination, b.routing_key, b.arguments), ctx.id)?;
                (b.nowait, exchange::AMQPMethod::BindOk(exchange::BindOk {}))
            }
            exchange::AMQPMethod::Unbind(u) if ctx.vhost.metadata().is_some() => {
                let op = DefinitionOp::Unbind {
                    source: u.source.to_string(),
                    destination: u.destination.to_string(),
                    to_exchange: true,
                    routing_key: u.routing_key.to_string(),
                    arguments: u.arguments,
                };
                let ok = |_| AMQPClass::Exchange(exchange::AMQPMethod::UnbindOk(exchange::UnbindOk {}));
                return self.change_definitions(ctx, op, u.nowait, ok);
            }
            exchange::AMQPMethod::Unbind(u) => {
                let binding = exchange_binding(u.destination, u.routing_key, u.arguments);
                vhost.unbind(u.source.as_str(), &binding, ctx.id)?;
                (u.nowait, exchange::AMQPMethod::UnbindOk(exchange::UnbindOk {}))
            }
            other => return Err(BrokerError::command_invalid(format!("{other:?} is sent by servers, not clients"))),
        };
        if !nowait {
            self.reply(ctx, AMQPClass::Exchange(ok));
        }
        Ok(())
    }

    /// In a cluster, a definition change goes through the metadata group: the channel's
    /// reply (or, with `nowait`, its next method) waits until it is applied on this node.
    pub(super) fn change_definitions(
        &mut self,
        ctx: &ConnectionContext,
        op: DefinitionOp,
        nowait: bool,
        ok: impl FnOnce(MetaOutcome) -> AMQPClass + Send + 'static,
    ) -> BrokerResult<()> {
        let Some(metadata) = ctx.vhost.metadata() else {
            return Err(BrokerError::new(ReplyCode::InternalError, "this node is not in a cluster"));
        };
        let vhost = ctx.vhost.name().to_string();
        self.pending = Some(PendingReply::new(self.id, async move {
            let outcome = metadata.change(&vhost, op).await?;
            Ok(if nowait { Answer::Nothing } else { Answer::Method(ok(outcome)) })
        }));
        Ok(())
    }

    /// Whether `name` is an exclusive queue of this node (those stay out of the cluster's
    /// definitions).
    pub(super) fn is_exclusive_here(&self, ctx: &ConnectionContext, name: &ShortString) -> bool {
        let name = self.queue_name(name).unwrap_or_default();
        ctx.vhost.queue(&name).is_ok_and(|q| q.definition().exclusive_owner.is_some())
    }

    /// `server_named`: a declare's name was generated by [`name_server_named_queue`].
    pub(super) fn queue_method(
        &mut self,
        ctx: &ConnectionContext,
        method: queue::AMQPMethod,
        server_named: bool,
    ) -> BrokerResult<()> {
        let vhost = &ctx.vhost;
        let (nowait, ok) = match method {
            queue::AMQPMethod::Declare(d) if direct_reply_to::is_reply_name(d.queue.as_str()) => {
                // The pseudo-queue, or a reply address whose requester is still there.
                vhost.declare_reply_to(d.queue.as_str())?;
                self.last_queue = Some(d.queue.to_string());
                let ok = queue::DeclareOk { queue: d.queue, message_count: 0, consumer_count: 1 };
                (d.nowait, queue::AMQPMethod::DeclareOk(ok))
            }
            queue::AMQPMethod::Declare(d) if !d.passive && !d.exclusive && ctx.vhost.metadata().is_some() => {
                let name = d.queue.to_string();
                if !server_named {
                    VirtualHost::check_queue_name(&name)?;
                }
                self.last_queue = Some(name.clone());
                let op = DefinitionOp::DeclareQueue {
                    name: name.clone(),
                    durable: d.durable,
                    auto_delete: d.auto_delete,
                    arguments: d.arguments,
                    members: None,
                };
                let ok = move |declared: MetaOutcome| {
                    AMQPClass::Queue(queue::AMQPMethod::DeclareOk(queue::DeclareOk {
                        queue: short(name),
                        message_count: declared.message_count,
                        consumer_count: declared.consumer_count,
                    }))
                };
                return self.change_definitions(ctx, op, d.nowait, ok);
            }
            queue::AMQPMethod::Declare(d) if d.passive => {
                let declared = vhost.declare_queue_passive(&self.queue_name(&d.queue)?, ctx.id)?.queue;
                let name = declared.name().to_string();
                self.last_queue = Some(name.clone());
                let declare_ok = move |(message_count, consumer_count)| {
                    queue::AMQPMethod::DeclareOk(queue::DeclareOk { queue: short(name), message_count, consumer_count })
                };
                match declared.counts() {
                    Reply::Now(counts) => (d.nowait, declare_ok(counts?)),
                    Reply::Later(_) if d.nowait => return Ok(()),
                    // A queue of another node: its home answers the counts.
                    Reply::Later(counts) => {
                        self.pending = Some(PendingReply::new(self.id, async move {
                            counts.await.map(|counts| Answer::Method(AMQPClass::Queue(declare_ok(counts))))
                        }));
                        return Ok(());
                    }
                }
            }
            queue::AMQPMethod::Declare(d) => {
                let definition = QueueDefinition {
                    name: d.queue.to_string(),
                    durable: d.durable,
                    exclusive_owner: d.exclusive.then_some(ctx.id),
                    auto_delete: d.auto_delete,
                    arguments: d.arguments,
                };
                let declared = if server_named {
                    vhost.declare_generated_queue(definition, ctx.id)?
                } else {
                    vhost.declare_queue(definition, ctx.id)?
                };
                let name = declared.queue.name().to_string();
                self.last_queue = Some(name.clone());
                let ok = queue::DeclareOk {
                    queue: short(name),
                    message_count: declared.message_count,
                    consumer_count: declared.consumer_count,
                };
                (d.nowait, queue::AMQPMethod::DeclareOk(ok))
            }
            queue::AMQPMethod::Bind(b) if ctx.vhost.metadata().is_some() => {
                let op = DefinitionOp::Bind {
                    source: b.exchange.to_string(),
                    destination: self.queue_name(&b.queue)?,
                    to_exchange: false,
                    routing_key: b.routing_key.to_string(),
                    arguments: b.arguments,
                };
                let ok = |_| AMQPClass::Queue(queue::AMQPMethod::BindOk(queue::BindOk {}));
                return self.change_definitions(ctx, op, b.nowait, ok);
            }
            queue::AMQPMethod::Bind(b) => {
                let binding = queue_binding(&self.queue_name(&b.queue)?, b.routing_key, b.arguments);
                vhost.bind(b.exchange.as_str(), binding, ctx.id)?;
                (b.nowait, queue::AMQPMethod::BindOk(queue::BindOk {}))
            }
            queue::AMQPMethod::Unbind(u) if ctx.vhost.metadata().is_some() => {
                let op = DefinitionOp::Unbind {
                    source: u.exchange.to_string(),
                    destination: self.queue_name(&u.queue)?,
                    to_exchange: false,
                    routing_key: u.routing_key.to_string(),
                    arguments: u.arguments,
                };
                let ok = |_| AMQPClass::Queue(queue::AMQPMethod::UnbindOk(queue::UnbindOk {}));
                return self.change_definitions(ctx, op, false, ok);
            }
            queue::AMQPMethod::Unbind(u) => {
                let queue = self.queue_name(&u.queue)?;
                vhost.unbind(u.exchange.as_str(), &queue_binding(&queue, u.routing_key, u.arguments), ctx.id)?;
                (false, queue::AMQPMethod::UnbindOk(queue::UnbindOk {}))
            }
            queue::AMQPMethod::Purge(p) => {
                let purge_ok =
                    |message_count| AMQPClass::Queue(queue::AMQPMethod::PurgeOk(queue::PurgeOk { message_count }));
                match self.usable_queue(ctx, &p.queue)?.purge() {
                    Reply::Now(purged) => {
                        (p.nowait, queue::AMQPMethod::PurgeOk(queue::PurgeOk { message_count: purged? }))
                    }
                    // Purged once the group applies it; with nowait nobody waits for the count.
                    Reply::Later(_) if p.nowait => return Ok(()),
                    Reply::Later(purged) => {
                        self.pending = Some(PendingReply::new(self.id, async move {
                            purged.await.map(|count| Answer::Method(purge_ok(count)))
                        }));
                        return Ok(());
                    }
                }
            }
            queue::AMQPMethod::Delete(d)
                if ctx.vhost.metadata().is_some() && !self.is_exclusive_here(ctx, &d.queue) =>
            {
                let name = self.queue_name(&d.queue)?;
                let condition = DeleteCondition { if_unused: d.if_unused, if_empty: d.if_empty };
                let vhost = Arc::clone(&ctx.vhost);
                let nowait = d.nowait;
                self.pending = Some(PendingReply::new(self.id, async move {
                    let message_count = warren_delivery::metadata::delete_queue(&vhost, &name, condition).await?;
                    let ok = AMQPClass::Queue(queue::AMQPMethod::DeleteOk(queue::DeleteOk { message_count }));
                    Ok(if nowait { Answer::Nothing } else { Answer::Method(ok) })
                }));
                return Ok(());
            }
            queue::AMQPMethod::Delete(d) => {
                let name = self.queue_name(&d.queue)?;
                let deleted = vhost.delete_queue(&name, d.if_unused, d.if_empty, ctx.id)?;
                if !d.nowait {
                    let message_count = deleted.message_count;
                    self.reply(ctx, AMQPClass::Queue(queue::AMQPMethod::DeleteOk(queue::DeleteOk { message_count })));
                }
                // Only now are its consumers cancelled: delete-ok first, as in RabbitMQ.
                drop(deleted);
                return Ok(());
            }
            other => return Err(BrokerError::command_invalid(format!("{other:?} is sent by servers, not clients"))),
        };
        if !nowait {
            self.reply(ctx, AMQPClass::Queue(ok));
        }
        Ok(())
    }
}

/// A `queue.declare` (not passive) with an empty name gets its server-generated name now,
/// so that its permissions are checked on the name it will have, as RabbitMQ does; whether
/// it did.
pub(super) fn name_server_named_queue(method: &mut AMQPClass) -> bool {
    match method {
        AMQPClass::Queue(queue::AMQPMethod::Declare(d)) if !d.passive && d.queue.as_str().is_empty() => {
            d.queue = short(VirtualHost::generated_queue_name());
            true
        }
        _ => false,
    }
}

pub(super) fn exchange_binding(destination: ShortString, routing_key: ShortString, arguments: FieldTable) -> Binding {
    Binding {
        destination: Destination::Exchange(destination.as_str().into()),
        routing_key: routing_key.to_string(),
        arguments,
    }
}

pub(super) fn queue_binding(queue: &str, routing_key: ShortString, arguments: FieldTable) -> Binding {
    Binding { destination: Destination::Queue(queue.into()), routing_key: routing_key.to_string(), arguments }
}
