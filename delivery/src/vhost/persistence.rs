//! A virtual host's durable definitions: restoring them at start, saving them after changes.

use super::{is_standard_exchange, is_stored, VirtualHost};
use crate::definitions::{
    binding_name, BindingRecord, Definitions, EntityKind, ExchangeRecord, LeftOut, LoadedDefinitions, QueueRecord,
};
use crate::error::{internal_error, BrokerResult};
use crate::exchange::{Binding, DelayedMessages, Destination, Exchange, ExchangeDefinition};
use crate::queue::{self, QueueArguments, QueueDefinition};
use std::collections::HashSet;
use std::sync::{Arc, Weak};

impl VirtualHost {
    /// Restores what `loaded` holds. A definition that cannot be restored (unreadable, invalid
    /// arguments, a binding whose end is missing) is left out on its own: logged, kept in an
    /// unreadable file beside the definitions with its data moved aside, and dropped from the
    /// stored definitions, so the rest of the virtual host comes back.
    pub(super) fn restore(&self, loaded: LoadedDefinitions) -> BrokerResult<()> {
        let Some(storage) = &self.storage else { return Ok(()) };
        let LoadedDefinitions { definitions, mut left_out, found } = loaded;
        let mut kept = Definitions::default();
        let mut exchanges = Vec::new();
        for record in definitions.exchanges {
            match exchange_definition(&record) {
                Ok(definition) => {
                    exchanges.push(definition);
                    kept.exchanges.push(record);
                }
                Err(e) => {
                    left_out.push(LeftOut::of_record(EntityKind::Exchange, Some(record.name.clone()), e.text, &record))
                }
            }
        }
        let mut queues = Vec::new();
        for record in definitions.queues {
            match queue_definition(&record) {
                Ok((definition, arguments)) => {
                    queues.push((definition, arguments, record.homes.clone()));
                    kept.queues.push(record);
                }
                Err(e) => {
                    left_out.push(LeftOut::of_record(EntityKind::Queue, Some(record.name.clone()), e.text, &record))
                }
            }
        }
        for record in definitions.bindings {
            match missing_end(&record, &kept, &left_out) {
                None => kept.bindings.push(record),
                Some(reason) => {
                    let name = binding_name(&record.source, &record.destination);
                    left_out.push(LeftOut::of_record(EntityKind::Binding, Some(name), reason, &record));
                }
            }
        }
        storage
            .prepare_dirs(&kept, &mut left_out, found)
            .map_err(|e| internal_error("cannot set aside definitions that cannot be read", e))?;

        for definition in exchanges {
            let replicated = storage.delayed_dir(&definition.name);
            let exchange = if definition.delayed && crate::quorum::holds_group(&replicated) {
                let delayed = self.replicated_delays(&definition.name, storage, &replicated, None)?;
                Exchange::with_delayed(definition, delayed)
            } else if definition.delayed {
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
        for (definition, arguments, homes) in queues {
            let queue = queue::factory::recover(definition, arguments, homes, storage, self.queue_context())?;
            tracing::info!(queue = queue.name(), messages = queue.message_count(), "recovered queue");
            self.queues.write().insert(queue.name().to_string(), queue);
        }
        for record in kept.bindings {
            let destination = if record.to_exchange {
                Destination::Exchange(record.destination.as_str().into())
            } else {
                Destination::Queue(record.destination.as_str().into())
            };
            let binding = Binding { destination, routing_key: record.routing_key, arguments: record.arguments };
            self.exchange(&record.source)?.bind(binding)?;
        }
        if !left_out.is_empty() {
            // The left-out records are in the unreadable file now; the definitions file
            // drops them, so the next start does not set them aside again.
            self.save_definitions()?;
        }
        Ok(())
    }

    /// Writes the durable definitions, if this virtual host is on disk. The caller waits for
    /// the write (a declare is answered once it is stored), but other clients do not: see
    /// [`without_stalling_others`].
    pub(super) fn save_definitions(&self) -> BrokerResult<()> {
        let Some(storage) = &self.storage else { return Ok(()) };
        if self.is_deleted() {
            // Its files are gone; writing the definitions would bring its directory back.
            return Ok(());
        }
        without_stalling_others(|| storage.save(|| self.durable_definitions()))
            .map_err(|e| internal_error("cannot save definitions", e))
    }

    fn durable_definitions(&self) -> Definitions {
        let exchanges = self.exchanges();
        let queues = self.queues();
        let durable_exchanges: HashSet<&str> =
            exchanges.iter().filter(|e| e.definition().durable).map(|e| e.name()).collect();
        let durable_queues: HashSet<&str> =
            queues.iter().filter(|q| is_stored(q.definition())).map(|q| q.name()).collect();
        let durable_exchange = |name: &str| durable_exchanges.contains(name);
        let durable_queue = |name: &str| durable_queues.contains(name);
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
                    homes: queue.homes().map(<[u64]>::to_vec).unwrap_or_default(),
                });
            }
        }
        definitions
    }
}

/// Runs `write` (a whole definitions file: encoded, written, fsynced twice) so that it holds
/// up no other client: on a multi-thread runtime the worker thread first hands its other
/// tasks to another worker, so one tenant declaring thousands of durable queues never stalls
/// another tenant's confirms. Elsewhere (a current-thread runtime, or no runtime) it just runs.
fn without_stalling_others<T>(write: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(write),
        _ => write(),
    }
}

fn exchange_definition(record: &ExchangeRecord) -> BrokerResult<ExchangeDefinition> {
    ExchangeDefinition::declared(
        &record.name,
        &record.kind,
        true,
        record.auto_delete,
        record.internal,
        record.arguments.clone(),
    )
}

/// A stored queue's definition and its parsed arguments (406 if they no longer parse).
fn queue_definition(record: &QueueRecord) -> BrokerResult<(QueueDefinition, QueueArguments)> {
    let definition = QueueDefinition {
        name: record.name.clone(),
        durable: true,
        exclusive_owner: None,
        auto_delete: record.auto_delete,
        arguments: record.arguments.clone(),
    };
    let arguments = QueueArguments::parse(&definition.arguments)?;
    Ok((definition, arguments))
}

/// Why a stored binding cannot be restored: its source or destination is not restored.
fn missing_end(record: &BindingRecord, kept: &Definitions, left_out: &[LeftOut]) -> Option<String> {
    let exchange_kept = |name: &str| is_standard_exchange(name) || kept.exchanges.iter().any(|e| e.name == name);
    let queue_kept = |name: &str| kept.queues.iter().any(|q| q.name == name);
    let why = |kind: EntityKind, role: &str, name: &str| {
        let was_left_out = left_out.iter().any(|l| l.kind == kind && l.name.as_deref() == Some(name));
        let what = if was_left_out { "was left out" } else { "does not exist" };
        Some(format!("its {role} {} '{name}' {what}", kind.as_str()))
    };
    if record.source.is_empty() || !exchange_kept(&record.source) {
        return why(EntityKind::Exchange, "source", &record.source);
    }
    if record.to_exchange && !exchange_kept(&record.destination) {
        return why(EntityKind::Exchange, "destination", &record.destination);
    }
    if !record.to_exchange && !queue_kept(&record.destination) {
        return why(EntityKind::Queue, "destination", &record.destination);
    }
    None
}
