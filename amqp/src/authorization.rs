//! Each AMQP method as the [`Operation`] access control checks, before the method is made:
//! `exchange.declare` (not passive), `exchange.delete`, `queue.declare` (not passive),
//! `queue.delete`, the binds and unbinds, `basic.publish`, and `basic.get`, `basic.consume`
//! and `queue.purge` as reads. What each operation needs is RabbitMQ's table in
//! [`warren_delivery::access::Operation`], shared with the management API. Passive declares
//! need nothing. On a topic exchange, the user's topic permissions there (if any) check the
//! routing key of each publish and the key of each bind and unbind from it. A refusal is 403
//! ACCESS_REFUSED on the channel.

use crate::connection_context::ConnectionContext;
use amq_protocol::protocol::{basic, exchange, queue, AMQPClass};
use amq_protocol::types::ShortString;
use std::sync::Arc;
use warren_delivery::access::{Operation, TopicAccess, TopicPermissions};
use warren_delivery::direct_reply_to;
use warren_delivery::exchange::alternate_exchange_of;
use warren_delivery::queue::QueueArguments;
use warren_delivery::BrokerResult;

/// The exchange a channel last published to, and the access-control generation it was
/// allowed under: publishing on to it needs no new check until permissions change (publishes
/// come at the message rate), but the routing key of each message is checked against the
/// user's topic permission there, if it has one.
#[derive(Debug, Default)]
pub struct PublishGrant {
    generation: u64,
    exchange: Option<ShortString>,
    topic: Option<Arc<TopicPermissions>>,
}

impl PublishGrant {
    fn check_topic(&self, ctx: &ConnectionContext, exchange: &str, routing_key: &str) -> BrokerResult<()> {
        match &self.topic {
            Some(topic) => topic.check(TopicAccess::Write, routing_key, exchange, ctx.vhost.name(), &ctx.user),
            None => Ok(()),
        }
    }
}

/// Checks that `ctx`'s user may make `method`; `queue_name` turns a method's queue field
/// into the queue it means ("" is the channel's last queue).
pub fn check(
    ctx: &ConnectionContext,
    method: &AMQPClass,
    queue_name: impl Fn(&str) -> String,
    grant: &mut PublishGrant,
) -> BrokerResult<()> {
    if let AMQPClass::Basic(basic::AMQPMethod::Publish(p)) = method {
        let generation = ctx.broker.access().generation();
        if grant.generation != generation || grant.exchange.as_ref() != Some(&p.exchange) {
            ctx.authorize(&Operation::Publish { exchange: p.exchange.as_str() })?;
            let topic = ctx.topic_permissions(p.exchange.as_str());
            *grant = PublishGrant { generation, exchange: Some(p.exchange.clone()), topic };
        }
        return grant.check_topic(ctx, p.exchange.as_str(), p.routing_key.as_str());
    }
    match method {
        AMQPClass::Exchange(exchange::AMQPMethod::Declare(d)) if !d.passive => {
            let alternate = alternate_exchange_of(&d.arguments);
            let exchange = d.exchange.as_str();
            ctx.authorize(&Operation::DeclareExchange { exchange, alternate: alternate.as_deref() })
        }
        AMQPClass::Exchange(exchange::AMQPMethod::Delete(d)) => {
            ctx.authorize(&Operation::DeleteExchange { exchange: d.exchange.as_str() })
        }
        AMQPClass::Exchange(exchange::AMQPMethod::Bind(b)) => {
            ctx.authorize(&Operation::BindExchange { source: b.source.as_str(), destination: b.destination.as_str() })?;
            ctx.check_topic(TopicAccess::Read, b.source.as_str(), b.routing_key.as_str())
        }
        AMQPClass::Exchange(exchange::AMQPMethod::Unbind(u)) => {
            ctx.authorize(&Operation::BindExchange { source: u.source.as_str(), destination: u.destination.as_str() })?;
            ctx.check_topic(TopicAccess::Read, u.source.as_str(), u.routing_key.as_str())
        }
        AMQPClass::Queue(queue::AMQPMethod::Declare(d))
            if !d.passive && !direct_reply_to::is_reply_name(d.queue.as_str()) =>
        {
            let name = queue_name(d.queue.as_str());
            let dead_letter_exchange = QueueArguments::parse(&d.arguments).ok().and_then(|a| a.dead_letter_exchange);
            ctx.authorize(&Operation::DeclareQueue {
                queue: &name,
                dead_letter_exchange: dead_letter_exchange.as_deref(),
            })
        }
        AMQPClass::Queue(queue::AMQPMethod::Delete(d)) => {
            ctx.authorize(&Operation::DeleteQueue { queue: &queue_name(d.queue.as_str()) })
        }
        AMQPClass::Queue(queue::AMQPMethod::Bind(b)) => {
            ctx.authorize(&Operation::BindQueue {
                exchange: b.exchange.as_str(),
                queue: &queue_name(b.queue.as_str()),
            })?;
            ctx.check_topic(TopicAccess::Read, b.exchange.as_str(), b.routing_key.as_str())
        }
        AMQPClass::Queue(queue::AMQPMethod::Unbind(u)) => {
            ctx.authorize(&Operation::BindQueue {
                exchange: u.exchange.as_str(),
                queue: &queue_name(u.queue.as_str()),
            })?;
            ctx.check_topic(TopicAccess::Read, u.exchange.as_str(), u.routing_key.as_str())
        }
        AMQPClass::Queue(queue::AMQPMethod::Purge(p)) => {
            ctx.authorize(&Operation::Read { queue: &queue_name(p.queue.as_str()) })
        }
        AMQPClass::Basic(basic::AMQPMethod::Get(g)) => {
            ctx.authorize(&Operation::Read { queue: &queue_name(g.queue.as_str()) })
        }
        AMQPClass::Basic(basic::AMQPMethod::Consume(c)) if c.queue.as_str() != direct_reply_to::PSEUDO_QUEUE => {
            ctx.authorize(&Operation::Read { queue: &queue_name(c.queue.as_str()) })
        }
        _ => Ok(()),
    }
}
