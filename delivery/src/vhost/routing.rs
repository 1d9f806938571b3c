//! Routing and publishing: from an exchange to queues, through exchange-to-exchange
//! bindings, alternate exchanges, delayed exchanges and dead-letter exchanges; and direct
//! replies, from the default exchange straight to a requester's channel.

use super::VirtualHost;
use crate::error::{BrokerError, BrokerResult};
use crate::exchange::delayed::delay_of;
use crate::exchange::{Destination, Exchange};
use crate::message::Message;
use crate::publish_outcome::PublishOutcome;
use crate::queue::{Published, Queue};
use crate::{dead_letter, direct_reply_to};
use std::sync::Arc;

/// Where a publish went: its exchange (none for the default exchange) and the queues.
type Routed = (Option<Arc<Exchange>>, Vec<Arc<Queue>>);

impl VirtualHost {
    /// Publishes a message to `exchange`: routed to its queues now, or held by a delayed
    /// exchange until its `x-delay` passes (`routed` then tells whether it would route now,
    /// for `mandatory`).
    pub fn publish(&self, exchange: &str, message: Arc<Message>) -> BrokerResult<PublishOutcome> {
        if let Some(expiration) = message.properties.expiration() {
            if message.properties.expiration_ms().is_none() {
                return Err(BrokerError::precondition_failed(format!(
                    "invalid expiration '{}': expected a whole number of milliseconds",
                    String::from_utf8_lossy(expiration)
                )));
            }
        }
        if exchange.is_empty() && direct_reply_to::is_reply_address(message.routing_key.as_str()) {
            // A direct reply: to its requester's channel, through no queue.
            let routed = self.reply_consumers().deliver(message);
            return Ok(PublishOutcome { routed, ..Default::default() });
        }
        let (source, queues) = self.route_with_source(exchange, &message)?;
        let delayed = source.as_ref().and_then(|s| s.delayed());
        // Only a delayed exchange reads x-delay: looking for it decodes the message's headers.
        if let Some((delayed, delay)) = delayed.and_then(|d| delay_of(&message).map(|delay| (d, delay))) {
            let mut outcome = PublishOutcome { routed: !queues.is_empty(), ..Default::default() };
            match delayed.hold(&message, delay) {
                Ok(mark) => outcome.marks.extend(mark),
                Err(error) => outcome.failure = Some(error),
            }
            return Ok(outcome);
        }
        Ok(deliver_to(&queues, &message))
    }

    /// A delayed message fell due: it is routed now by its exchange's bindings. The disk
    /// writes its targets make, to wait for before it counts as handed on; `None` if a target
    /// failed to store it.
    pub(crate) fn route_due(&self, exchange: &str, message: Message) -> Option<Vec<crate::message_store::DurableMark>> {
        match self.route(exchange, &message) {
            Ok(queues) => {
                let outcome = deliver_to(&queues, &Arc::new(message));
                if let Some(error) = outcome.failure {
                    tracing::error!(exchange, %error, "cannot store a delayed message that fell due");
                    return None;
                }
                Some(outcome.marks)
            }
            Err(error) => {
                tracing::warn!(exchange, %error, "delayed message dropped: its exchange is gone");
                Some(Vec::new())
            }
        }
    }

    /// Routes a dead-lettered message (its exchange is the dead-letter exchange) to its queues,
    /// skipping any queue it would reach in a cycle with no rejection. A missing dead-letter
    /// exchange drops it, as in RabbitMQ. The outcome says where it went and what a confirm
    /// of it waits for (at-least-once dead-lettering waits for it).
    pub(crate) fn publish_dead_letter(&self, from: &str, message: Message) -> PublishOutcome {
        let queues = match self.route(message.exchange.as_str(), &message) {
            Ok(queues) => queues,
            Err(error) => {
                tracing::warn!(queue = from, %error, "dead-letter exchange unusable; message dropped");
                return PublishOutcome::default();
            }
        };
        let (cycles, queues): (Vec<_>, Vec<_>) =
            queues.into_iter().partition(|q| dead_letter::is_cycle(&message, q.name()));
        for queue in cycles {
            tracing::debug!(queue = from, target = queue.name(), "dead-letter cycle; message dropped");
        }
        let outcome = deliver_to(&queues, &Arc::new(message));
        if let Some(error) = &outcome.failure {
            tracing::error!(queue = from, %error, "cannot store a dead letter");
        }
        outcome
    }

    /// The queues a message published to `exchange` goes to, each once. A missing exchange is
    /// 404; an internal one is 403.
    pub fn route(&self, exchange: &str, message: &Message) -> BrokerResult<Vec<Arc<Queue>>> {
        self.route_with_source(exchange, message).map(|(_, queues)| queues)
    }

    /// Like [`VirtualHost::route`], also returning the exchange (none for the default one).
    fn route_with_source(&self, exchange: &str, message: &Message) -> BrokerResult<Routed> {
        if exchange.is_empty() {
            let queue = self.queues.read().get(message.routing_key.as_str()).cloned();
            return Ok((None, queue.into_iter().collect()));
        }
        let source = self.exchange(exchange)?;
        if source.definition().internal {
            return Err(BrokerError::access_refused(format!(
                "cannot publish to internal exchange '{exchange}' in vhost '{}'",
                self.name
            )));
        }
        let mut visited = Vec::new();
        let mut queues = Vec::new();
        self.route_from(&source, message, &mut visited, &mut queues);
        Ok((Some(source), queues))
    }

    fn route_from(
        &self,
        exchange: &Exchange,
        message: &Message,
        visited: &mut Vec<String>,
        queues: &mut Vec<Arc<Queue>>,
    ) {
        let mut destinations = Vec::new();
        exchange.route(message, &mut destinations);
        if destinations.is_empty() {
            // The alternate exchange takes what this exchange's own bindings do not match: its
            // own argument's, else a policy's.
            let alternate = exchange.definition().alternate_exchange();
            if let Some(alternate) = alternate.or_else(|| self.policy_alternate_exchange(exchange.name())) {
                self.route_via(exchange, &alternate, message, visited, queues);
            }
            return;
        }
        let mut onward = Vec::new();
        {
            let known = self.queues.read();
            for destination in destinations {
                match destination {
                    Destination::Queue(name) => {
                        if let Some(queue) = known.get(&*name) {
                            if !queues.iter().any(|q| Arc::ptr_eq(q, queue)) {
                                queues.push(Arc::clone(queue));
                            }
                        }
                    }
                    Destination::Exchange(name) => onward.push(name),
                }
            }
        }
        for name in onward {
            self.route_via(exchange, &name, message, visited, queues);
        }
    }

    /// Follows an exchange-to-exchange binding or an alternate exchange, once per exchange.
    fn route_via(
        &self,
        from: &Exchange,
        name: &str,
        message: &Message,
        visited: &mut Vec<String>,
        queues: &mut Vec<Arc<Queue>>,
    ) {
        // The origin is recorded only now: most publishes never leave their exchange.
        if visited.is_empty() {
            visited.push(from.name().to_string());
        }
        if visited.iter().any(|v| v == name) {
            return;
        }
        visited.push(name.to_string());
        if let Ok(next) = self.exchange(name) {
            self.route_from(&next, message, visited, queues);
        }
    }
}

fn deliver_to(queues: &[Arc<Queue>], message: &Arc<Message>) -> PublishOutcome {
    let mut outcome = PublishOutcome { routed: !queues.is_empty(), ..Default::default() };
    for queue in queues {
        match queue.publish(Arc::clone(message)) {
            Ok(Published::Stored(mark)) => outcome.marks.extend(mark),
            Ok(Published::Rejected) => outcome.rejected = true,
            Err(error) => {
                tracing::error!(queue = queue.name(), %error, "cannot store message");
                outcome.failure = Some(error);
            }
        }
    }
    outcome
}
