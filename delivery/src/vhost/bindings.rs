//! Bindings: binding and unbinding as RabbitMQ answers them, and auto-delete exchanges, which
//! go when their last binding goes.

use super::exchanges::refuse_default_exchange;
use super::persistence::durable;
use super::{refuse_too_long, VirtualHost};
use crate::connection_id::ConnectionId;
use crate::definitions::DefinitionsChange;
use crate::direct_reply_to;
use crate::error::{BrokerError, BrokerResult};
use crate::exchange::{Binding, Destination, Exchange};
use std::sync::Arc;

impl VirtualHost {
    /// `queue.bind` / `exchange.bind` from `connection`: both ends must exist (404), and a
    /// queue must not be another connection's exclusive queue (405).
    pub fn bind(&self, source: &str, binding: Binding, connection: ConnectionId) -> BrokerResult<()> {
        check_binding_ends(source, &binding.destination)?;
        refuse_too_long("routing key", &binding.routing_key)?;
        match &binding.destination {
            Destination::Exchange(name) => {
                self.exchange(name)?;
            }
            Destination::Queue(name) => self.queue(name)?.check_owner(connection)?,
        }
        let exchange = self.exchange(source)?;
        let pending = {
            let _lifecycle = self.lifecycle.lock();
            let record = self.binding_record(&exchange, &binding);
            if !exchange.bind(binding)? {
                return Ok(());
            }
            match record {
                Some(record) => self.record(DefinitionsChange::PutBinding(record))?,
                None => return Ok(()),
            }
        };
        durable(pending)
    }

    /// `queue.unbind` / `exchange.unbind` from `connection`. As in RabbitMQ, unbinding what is
    /// not bound succeeds, and so does unbinding from or to an exchange or queue that does not
    /// exist (clients tear down after auto-delete entities have already gone). Only a binding
    /// that exists to another connection's exclusive queue is 405. An auto-delete source left
    /// with no binding is deleted.
    pub fn unbind(&self, source: &str, binding: &Binding, connection: ConnectionId) -> BrokerResult<()> {
        check_binding_ends(source, &binding.destination)?;
        let Ok(exchange) = self.exchange(source) else { return Ok(()) };
        if let Destination::Queue(name) = &binding.destination {
            if let Ok(queue) = self.queue(name) {
                if exchange.is_bound(binding) {
                    queue.check_owner(connection)?;
                }
            }
        }
        let pending = {
            let _lifecycle = self.lifecycle.lock();
            let record = self.binding_record(&exchange, binding);
            if !exchange.unbind(binding) {
                return Ok(());
            }
            match record {
                _ if is_unused_auto_delete(&exchange) => None,
                Some(record) => Some(self.record(DefinitionsChange::RemoveBinding(record))?),
                None => return Ok(()),
            }
        };
        match pending {
            Some(pending) => durable(pending),
            None => self.remove_exchange(&exchange),
        }
    }

    /// Removes every binding to `destination`; returns the auto-delete exchanges this left
    /// with no binding, which are to go too.
    pub(super) fn unbind_everywhere(&self, destination: &Destination) -> Vec<Arc<Exchange>> {
        self.exchanges()
            .into_iter()
            .filter(|source| source.unbind_destination(destination) > 0 && is_unused_auto_delete(source))
            .collect()
    }
}

/// Whether an auto-delete exchange has lost its last binding (as a source), and so goes.
fn is_unused_auto_delete(exchange: &Exchange) -> bool {
    exchange.definition().auto_delete && exchange.binding_count() == 0
}

/// The checks on a binding's ends made before anything is looked up: neither end may be the
/// default exchange (403), and a direct reply-to name is no queue to bind (403).
fn check_binding_ends(source: &str, destination: &Destination) -> BrokerResult<()> {
    refuse_default_exchange(source)?;
    match destination {
        Destination::Exchange(name) => refuse_default_exchange(name),
        Destination::Queue(name) if direct_reply_to::is_reply_name(name) => {
            Err(BrokerError::access_refused("cannot bind or unbind to a direct reply-to pseudo-queue"))
        }
        Destination::Queue(_) => Ok(()),
    }
}
