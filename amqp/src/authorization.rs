//! What each AMQP method needs of the user's permissions, as RabbitMQ's access-control table
//! says, checked before the method is made:
//!
//! | method | configure | write | read |
//! |---|---|---|---|
//! | `exchange.declare` (not passive) | exchange | alternate exchange, if any | exchange, if it has one |
//! | `exchange.delete` | exchange | | |
//! | `queue.declare` (not passive) | queue | dead-letter exchange, if any | queue, if it has one |
//! | `queue.delete` | queue | | |
//! | `exchange.bind`, `exchange.unbind` | | destination | source |
//! | `queue.bind`, `queue.unbind` | | queue | exchange |
//! | `basic.publish` | | exchange | |
//! | `basic.get`, `basic.consume`, `queue.purge` | | | queue |
//!
//! Passive declares need nothing. A refusal is 403 ACCESS_REFUSED on the channel.

use crate::channel::ConnectionContext;
use amq_protocol::protocol::{basic, exchange, queue, AMQPClass};
use amq_protocol::types::ShortString;
use warren_delivery::access::{Access, Resource};
use warren_delivery::direct_reply_to;
use warren_delivery::exchange::alternate_exchange_of;
use warren_delivery::queue::QueueArguments;
use warren_delivery::BrokerResult;

/// The exchange a channel last published to, and the access-control generation it was
/// allowed under: publishing on to it needs no new check until permissions change (publishes
/// come at the message rate).
#[derive(Debug, Default)]
pub struct PublishGrant {
    generation: u64,
    exchange: Option<ShortString>,
}

/// Checks that `ctx`'s user may make `method`; `queue_name` turns a method's queue field
/// into the queue it means ("" is the channel's last queue).
pub fn check(
    ctx: &ConnectionContext,
    method: &AMQPClass,
    queue_name: impl Fn(&str) -> String,
    grant: &mut PublishGrant,
) -> BrokerResult<()> {
    use Access::{Configure, Read, Write};
    use Resource::{Exchange, Queue};
    let need = |access: Access, resource: Resource<'_>| ctx.check(access, resource);
    match method {
        AMQPClass::Basic(basic::AMQPMethod::Publish(p)) => {
            let generation = ctx.broker.access().generation();
            if grant.generation == generation && grant.exchange.as_ref() == Some(&p.exchange) {
                return Ok(());
            }
            need(Write, Exchange(p.exchange.as_str()))?;
            *grant = PublishGrant { generation, exchange: Some(p.exchange.clone()) };
            Ok(())
        }
        AMQPClass::Exchange(exchange::AMQPMethod::Declare(d)) if !d.passive => {
            need(Configure, Exchange(d.exchange.as_str()))?;
            if let Some(alternate) = alternate_exchange_of(&d.arguments) {
                need(Write, Exchange(&alternate))?;
                need(Read, Exchange(d.exchange.as_str()))?;
            }
            Ok(())
        }
        AMQPClass::Exchange(exchange::AMQPMethod::Delete(d)) => need(Configure, Exchange(d.exchange.as_str())),
        AMQPClass::Exchange(exchange::AMQPMethod::Bind(b)) => {
            need(Write, Exchange(b.destination.as_str()))?;
            need(Read, Exchange(b.source.as_str()))
        }
        AMQPClass::Exchange(exchange::AMQPMethod::Unbind(u)) => {
            need(Write, Exchange(u.destination.as_str()))?;
            need(Read, Exchange(u.source.as_str()))
        }
        AMQPClass::Queue(queue::AMQPMethod::Declare(d))
            if !d.passive && !direct_reply_to::is_reply_name(d.queue.as_str()) =>
        {
            let name = queue_name(d.queue.as_str());
            need(Configure, Queue(&name))?;
            let dead_letter_exchange = QueueArguments::parse(&d.arguments).ok().and_then(|a| a.dead_letter_exchange);
            if let Some(dead_letter_exchange) = dead_letter_exchange {
                need(Write, Exchange(&dead_letter_exchange))?;
                need(Read, Queue(&name))?;
            }
            Ok(())
        }
        AMQPClass::Queue(queue::AMQPMethod::Delete(d)) => need(Configure, Queue(&queue_name(d.queue.as_str()))),
        AMQPClass::Queue(queue::AMQPMethod::Bind(b)) => {
            need(Write, Queue(&queue_name(b.queue.as_str())))?;
            need(Read, Exchange(b.exchange.as_str()))
        }
        AMQPClass::Queue(queue::AMQPMethod::Unbind(u)) => {
            need(Write, Queue(&queue_name(u.queue.as_str())))?;
            need(Read, Exchange(u.exchange.as_str()))
        }
        AMQPClass::Queue(queue::AMQPMethod::Purge(p)) => need(Read, Queue(&queue_name(p.queue.as_str()))),
        AMQPClass::Basic(basic::AMQPMethod::Get(g)) => need(Read, Queue(&queue_name(g.queue.as_str()))),
        AMQPClass::Basic(basic::AMQPMethod::Consume(c)) if c.queue.as_str() != direct_reply_to::PSEUDO_QUEUE => {
            need(Read, Queue(&queue_name(c.queue.as_str())))
        }
        _ => Ok(()),
    }
}
