//! A virtual host's durable definitions: restoring them at start, saving them after changes.

use super::{internal_error, is_standard_exchange, is_stored, VirtualHost};
use crate::definitions::{BindingRecord, Definitions, ExchangeRecord, QueueRecord};
use crate::error::BrokerResult;
use crate::exchange::{Binding, DelayedMessages, Destination, Exchange, ExchangeDefinition};
use crate::queue::{Queue, QueueArguments, QueueDefinition, QueueType};
use crate::stream::StreamArguments;
use std::sync::{Arc, Weak};

impl VirtualHost {
    pub(super) fn restore(&self, definitions: Definitions) -> BrokerResult<()> {
        let Some(storage) = &self.storage else { return Ok(()) };
        for record in definitions.exchanges {
            let definition = ExchangeDefinition::declared(
                &record.name,
                &record.kind,
                true,
                record.auto_delete,
                record.internal,
                record.arguments,
            )?;
            let exchange = if definition.delayed {
                let store = storage.open_delayed(&definition.name).map_err(|e| internal_error("cannot recover", e))?;
                let (me, scheduler) = (Weak::clone(&self.me), Arc::clone(&self.scheduler));
                let delayed = DelayedMessages::recover(&definition.name, me, scheduler, store)
                    .map_err(|e| internal_error("cannot recover delayed messages", e))?;
                Exchange::with_delayed(definition, delayed)
            } else {
                Exchange::new(definition)
            };
            self.exchanges.write().insert(exchange.name().to_string(), Arc::new(exchange));
        }
        for record in definitions.queues {
            let definition = QueueDefinition {
                name: record.name,
                durable: true,
                exclusive_owner: None,
                auto_delete: record.auto_delete,
                arguments: record.arguments,
            };
            let queue = if QueueArguments::parse(&definition.arguments)?.queue_type == QueueType::Stream {
                let arguments = StreamArguments::parse(&definition.arguments)?;
                let stream = storage
                    .open_stream(&definition.name, arguments)
                    .map_err(|e| internal_error("cannot recover a stream", e))?;
                Queue::new_stream(definition, stream, self.queue_context())?
            } else {
                let store =
                    storage.open_queue(&definition.name).map_err(|e| internal_error("cannot recover a queue", e))?;
                Queue::recover(definition, store, self.queue_context())?
            };
            tracing::info!(queue = queue.name(), messages = queue.message_count(), "recovered queue");
            self.queues.write().insert(queue.name().to_string(), queue);
        }
        for record in definitions.bindings {
            let destination = if record.to_exchange {
                Destination::Exchange(record.destination.as_str().into())
            } else {
                Destination::Queue(record.destination.as_str().into())
            };
            let binding = Binding { destination, routing_key: record.routing_key, arguments: record.arguments };
            if let Ok(source) = self.exchange(&record.source) {
                source.bind(binding)?;
            }
        }
        Ok(())
    }

    /// Writes the durable definitions, if this virtual host is on disk.
    pub(super) fn save_definitions(&self) -> BrokerResult<()> {
        let Some(storage) = &self.storage else { return Ok(()) };
        storage.save(|| self.durable_definitions()).map_err(|e| internal_error("cannot save definitions", e))
    }

    fn durable_definitions(&self) -> Definitions {
        let exchanges = self.exchanges();
        let queues = self.queues();
        let durable_exchange = |name: &str| exchanges.iter().any(|e| e.name() == name && e.definition().durable);
        let durable_queue = |name: &str| queues.iter().any(|q| q.name() == name && is_stored(q.definition()));
        let mut definitions = Definitions::default();
        for exchange in &exchanges {
            let d = exchange.definition();
            if d.durable && !is_standard_exchange(&d.name) {
                definitions.exchanges.push(ExchangeRecord {
                    name: d.name.clone(),
                    kind: d.type_name().to_string(),
                    auto_delete: d.auto_delete,
                    internal: d.internal,
                    arguments: d.arguments.clone(),
                });
            }
            if !d.durable {
                continue;
            }
            for binding in exchange.bindings() {
                let (destination, to_exchange) = match &binding.destination {
                    Destination::Queue(name) => (name.to_string(), false),
                    Destination::Exchange(name) => (name.to_string(), true),
                };
                let durable = if to_exchange { durable_exchange(&destination) } else { durable_queue(&destination) };
                if durable {
                    definitions.bindings.push(BindingRecord {
                        source: d.name.clone(),
                        destination,
                        to_exchange,
                        routing_key: binding.routing_key,
                        arguments: binding.arguments,
                    });
                }
            }
        }
        for queue in &queues {
            let d = queue.definition();
            if is_stored(d) {
                definitions.queues.push(QueueRecord {
                    name: d.name.clone(),
                    auto_delete: d.auto_delete,
                    arguments: d.arguments.clone(),
                });
            }
        }
        definitions
    }
}
