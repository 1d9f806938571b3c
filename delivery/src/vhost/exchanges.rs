//! A virtual host's exchanges: the standard ones every vhost has, declaring (a delayed
//! exchange with its held messages, durable or replicated), and deleting, with every binding
//! that leads to the exchange.

use super::persistence::{self, durable};
use super::{refuse_reserved_name, VirtualHost, RESERVED_PREFIX};
use crate::definitions::{DefinitionsChange, PendingChange, VhostStorage};
use crate::equivalence;
use crate::error::{internal_error, BrokerError, BrokerResult};
use crate::exchange::{DelayedMessages, Destination, Exchange, ExchangeDefinition, ExchangeKind, ExchangeType};
use crate::message_store::MessageStore;
use crate::quorum::InitialMembers;
use amq_protocol::types::FieldTable;
use std::sync::{Arc, Weak};

/// The exchanges every vhost has: the default exchange and the `amq.` ones.
pub(super) fn standard_exchanges() -> impl Iterator<Item = ExchangeDefinition> {
    let standard = [
        ("", ExchangeKind::Direct),
        ("amq.direct", ExchangeKind::Direct),
        ("amq.fanout", ExchangeKind::Fanout),
        ("amq.topic", ExchangeKind::Topic),
        ("amq.headers", ExchangeKind::Headers),
        ("amq.match", ExchangeKind::Headers),
    ];
    standard.into_iter().map(|(name, kind)| ExchangeDefinition {
        name: name.to_string(),
        kind: ExchangeType::Routing(kind),
        durable: true,
        auto_delete: false,
        internal: false,
        arguments: FieldTable::default(),
    })
}

/// Whether `name` is one of the exchanges every vhost has (or would be: `amq.` is reserved).
pub(super) fn is_standard_exchange(name: &str) -> bool {
    name.is_empty() || name.starts_with(RESERVED_PREFIX)
}

/// The default exchange cannot be declared, deleted, or bound from or to (403).
pub(super) fn refuse_default_exchange(name: &str) -> BrokerResult<()> {
    if name.is_empty() {
        return Err(BrokerError::access_refused("operation not permitted on the default exchange"));
    }
    Ok(())
}

impl VirtualHost {
    /// `exchange.declare` (not passive): creates it, or checks that it is equivalent. The
    /// default exchange is 403; so is a new name with the reserved `amq.` prefix (an existing
    /// `amq.` exchange is only checked for equivalence, as in RabbitMQ).
    pub fn declare_exchange(&self, definition: ExchangeDefinition) -> BrokerResult<()> {
        self.declare_exchange_with(definition, None)
    }

    /// `exchange.declare` of a durable delayed exchange in a cluster, its pending set
    /// replicated on `members` (chosen by the node the declare came from).
    pub fn declare_replicated_exchange(
        &self,
        definition: ExchangeDefinition,
        members: InitialMembers,
    ) -> BrokerResult<()> {
        self.declare_exchange_with(definition, Some(members))
    }

    fn declare_exchange_with(
        &self,
        definition: ExchangeDefinition,
        members: Option<InitialMembers>,
    ) -> BrokerResult<()> {
        refuse_default_exchange(&definition.name)?;
        let pending = {
            let _lifecycle = self.lifecycle.lock();
            self.refuse_if_deleted()?;
            let record = {
                let mut exchanges = self.exchanges.write();
                if let Some(existing) = exchanges.get(&definition.name) {
                    return equivalence::check_exchange(existing.definition(), &definition, &self.name);
                }
                refuse_reserved_name("exchange", &definition.name)?;
                let exchange = self.new_exchange(definition, members)?;
                let record = exchange.definition().durable.then(|| persistence::exchange_record(exchange.definition()));
                exchanges.insert(exchange.name().to_string(), Arc::new(exchange));
                record
            };
            match record {
                Some(record) => self.record(DefinitionsChange::PutExchange(record))?,
                None => return Ok(()),
            }
        };
        durable(pending)
    }

    /// `exchange.declare` with passive set: the exchange must exist (404); the default
    /// exchange is 403, as in RabbitMQ.
    pub fn declare_exchange_passive(&self, name: &str) -> BrokerResult<Arc<Exchange>> {
        refuse_default_exchange(name)?;
        self.exchange(name)
    }

    fn new_exchange(&self, definition: ExchangeDefinition, members: Option<InitialMembers>) -> BrokerResult<Exchange> {
        if !definition.kind.is_delayed() {
            return Ok(Exchange::new(definition));
        }
        if let Some(storage) = self.storage.as_ref().filter(|_| self.replaying() && definition.durable) {
            if storage.delayed_dir(&definition.name).exists() {
                tracing::info!(exchange = %definition.name, "the catalog's replay reopens a delayed exchange's files");
                return self.recover_delayed(definition, storage);
            }
        }
        if let (Some(storage), Some(members)) = (&self.storage, members) {
            let dir = storage.create_delayed_dir(&definition.name).map_err(|e| internal_error("cannot create", e))?;
            let delayed = self.replicated_delays(&definition.name, storage, &dir, Some(members))?;
            return Ok(Exchange::with_delayed(definition, delayed));
        }
        let store = match (&self.storage, definition.durable) {
            (Some(storage), true) => {
                let store = storage.create_delayed(&definition.name).map_err(|e| internal_error("cannot create", e))?;
                Some(Box::new(store) as Box<dyn MessageStore>)
            }
            _ => None,
        };
        let delayed = DelayedMessages::new(&definition.name, Weak::clone(&self.me), Arc::clone(&self.scheduler), store);
        Ok(Exchange::with_delayed(definition, delayed))
    }

    /// This node's member of the replicated pending set of delayed exchange `exchange`, kept
    /// in `dir` (a new group if `members` are given).
    pub(crate) fn replicated_delays(
        &self,
        exchange: &str,
        storage: &VhostStorage,
        dir: &std::path::Path,
        members: Option<InitialMembers>,
    ) -> BrokerResult<Arc<dyn crate::exchange::HeldMessages>> {
        let delays = crate::exchange::ReplicatedDelays::open(
            exchange,
            &self.name,
            Weak::clone(&self.me),
            Arc::clone(&self.scheduler),
            dir,
            storage.replicated_log_config(),
            Arc::clone(&self.replication),
            members,
        )
        .map_err(|e| internal_error("cannot start the delayed exchange's group", e))?;
        Ok(delays)
    }

    /// `exchange.delete`. Deleting an exchange that does not exist succeeds, as in RabbitMQ;
    /// the default exchange and the `amq.` ones are 403.
    pub fn delete_exchange(&self, name: &str, if_unused: bool) -> BrokerResult<()> {
        refuse_default_exchange(name)?;
        if name.starts_with(RESERVED_PREFIX) {
            return Err(BrokerError::access_refused(format!(
                "deletion of system exchange '{name}' in vhost '{}' not allowed",
                self.name
            )));
        }
        let Ok(exchange) = self.exchange(name) else { return Ok(()) };
        if if_unused && exchange.binding_count() > 0 {
            return Err(BrokerError::precondition_failed(format!("exchange '{name}' in vhost '{}' in use", self.name)));
        }
        self.remove_exchange(&exchange)
    }

    /// Removes an exchange (its own bindings go with it) and every binding that leads to it,
    /// which may leave an auto-delete source with none: that goes too, and so on. Each
    /// durable exchange's removal is recorded (with the bindings from and to it).
    pub(super) fn remove_exchange(&self, exchange: &Arc<Exchange>) -> BrokerResult<()> {
        let mut doomed = vec![Arc::clone(exchange)];
        let mut pending = Vec::new();
        while let Some(exchange) = doomed.pop() {
            let Some(removal) = self.unregister_exchange(&exchange) else { continue };
            pending.push(removal);
            let destination = Destination::Exchange(exchange.name().into());
            doomed.extend(self.unbind_everywhere(&destination));
        }
        pending.into_iter().try_for_each(|removal| durable(removal?))
    }

    /// Takes `exchange` out of the name map (if it is still the one there), records that a
    /// durable one went, and destroys the messages a delayed exchange holds; `None` if it
    /// was not there.
    fn unregister_exchange(&self, exchange: &Arc<Exchange>) -> Option<BrokerResult<PendingChange>> {
        let _lifecycle = self.lifecycle.lock();
        {
            let mut exchanges = self.exchanges.write();
            if !exchanges.get(exchange.name()).is_some_and(|e| Arc::ptr_eq(e, exchange)) {
                return None;
            }
            exchanges.remove(exchange.name());
        }
        if let Some(delayed) = exchange.delayed() {
            delayed.destroy();
        }
        if !exchange.definition().durable {
            return Some(Ok(PendingChange::default()));
        }
        Some(self.record(DefinitionsChange::RemoveExchange { name: exchange.name().to_string() }))
    }
}
