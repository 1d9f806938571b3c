//! A virtual host's durable definitions: restoring them at start, recording each change.

use super::exchanges::is_standard_exchange;
use super::{is_stored, VirtualHost};
use crate::definitions::{
    binding_name, BindingRecord, Definitions, DefinitionsChange, EntityKind, ExchangeRecord, LeftOut,
    LoadedDefinitions, PendingChange, QueueRecord, VhostStorage,
};
use crate::error::{internal_error, BrokerResult};
use crate::exchange::{Binding, DelayedMessages, Destination, Exchange, ExchangeDefinition};
use crate::queue::{self, Queue, QueueDefinition};
use std::collections::HashSet;
use std::sync::{Arc, Weak};

impl VirtualHost {
    /// Restores what `loaded` holds. A definition that cannot be restored (unreadable, invalid
    /// arguments, a binding whose end is missing) is left out on its own: logged, kept in an
    /// unreadable file beside the definitions with its data moved aside, and dropped from the
    /// stored definitions, so the rest of the virtual host comes back.
    pub(super) fn restore(&self, loaded: LoadedDefinitions) -> BrokerResult<()> {
        let Some(storage) = &self.storage else { return Ok(()) };
        let LoadedDefinitions { definitions, mut left_out, found, generation, journal_damage } = loaded;
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
            let definition = queue_definition(&record);
            match self.resolve(&definition) {
                Ok(resolved) => {
                    queues.push((definition, resolved, record.homes.clone()));
                    kept.queues.push(record);
                }
                Err(e) => {
                    left_out.push(LeftOut::of_record(EntityKind::Queue, Some(record.name.clone()), e.text, &record))
                }
            }
        }
        let ends = KeptEnds::of(&kept.exchanges, &kept.queues);
        for record in definitions.bindings {
            match missing_end(&record, &ends, &left_out) {
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
            let exchange = if definition.kind.is_delayed() {
                self.recover_delayed(definition, storage)?
            } else {
                Exchange::new(definition)
            };
            self.exchanges.write().insert(exchange.name().to_string(), Arc::new(exchange));
        }
        for (definition, resolved, homes) in queues {
            let queue = queue::factory::recover(definition, resolved.arguments, homes, storage, self.queue_context())?;
            queue.set_applied(resolved.applied);
            tracing::info!(queue = queue.name(), messages = queue.message_count(), "recovered queue");
            self.queues.write().insert(queue.name().to_string(), queue);
        }
        for record in kept.bindings.iter().cloned() {
            let destination = if record.to_exchange {
                Destination::Exchange(record.destination.as_str().into())
            } else {
                Destination::Queue(record.destination.as_str().into())
            };
            let binding = Binding { destination, routing_key: record.routing_key, arguments: record.arguments };
            self.exchange(&record.source)?.bind(binding)?;
        }
        // The left-out records are in the unreadable file now; the definitions written here
        // drop them, so the next start does not set them aside again.
        storage
            .start_recording(&kept, generation, journal_damage.as_ref())
            .map_err(|e| internal_error("cannot save definitions", e))
    }

    /// A durable delayed exchange reopened from its files: its replicated group's member, or
    /// the store of the messages it holds.
    pub(super) fn recover_delayed(
        &self,
        definition: ExchangeDefinition,
        storage: &VhostStorage,
    ) -> BrokerResult<Exchange> {
        let replicated = storage.delayed_dir(&definition.name);
        if crate::quorum::holds_group(&replicated) {
            let delayed = self.replicated_delays(&definition.name, storage, &replicated, None)?;
            return Ok(Exchange::with_delayed(definition, delayed));
        }
        let store = storage.open_delayed(&definition.name).map_err(|e| internal_error("cannot recover", e))?;
        let (me, scheduler) = (Weak::clone(&self.me), Arc::clone(&self.scheduler));
        let delayed = DelayedMessages::recover(&definition.name, me, scheduler, store)
            .map_err(|e| internal_error("cannot recover delayed messages", e))?;
        Ok(Exchange::with_delayed(definition, delayed))
    }

    /// Records `change` of the durable definitions, if this virtual host is on disk. Called
    /// under the lifecycle lock, together with the change itself, so that changes are
    /// recorded in the order they are made; the caller then makes it durable with
    /// [`durable`], without the lock.
    pub(super) fn record(&self, change: DefinitionsChange) -> BrokerResult<PendingChange> {
        let Some(storage) = &self.storage else { return Ok(PendingChange::default()) };
        if self.is_deleted() {
            // Its files are gone; recording would bring its directory back.
            return Ok(PendingChange::default());
        }
        storage.record(change).map_err(|e| internal_error("cannot save definitions", e))
    }

    /// Folds the journal of changes into the definitions file (a clean stop).
    pub(super) fn compact_definitions(&self) {
        let Some(storage) = &self.storage else { return };
        if self.is_deleted() {
            return;
        }
        if let Err(error) = storage.compact_now() {
            tracing::warn!(vhost = %self.name, %error, "definitions left in their journal (read back at start)");
        }
    }

    /// A durable binding's record, if both its ends are durable (only those are stored).
    pub(super) fn binding_record(&self, source: &Exchange, binding: &Binding) -> Option<BindingRecord> {
        if !source.definition().durable {
            return None;
        }
        let (destination, to_exchange, durable) = match &binding.destination {
            Destination::Queue(name) => {
                (name.to_string(), false, self.queue(name).is_ok_and(|q| is_stored(q.definition())))
            }
            Destination::Exchange(name) => {
                (name.to_string(), true, self.exchange(name).is_ok_and(|e| e.definition().durable))
            }
        };
        durable.then(|| BindingRecord {
            source: source.name().to_string(),
            destination,
            to_exchange,
            routing_key: binding.routing_key.clone(),
            arguments: binding.arguments.clone(),
        })
    }

    /// Folds the durable definitions out of the live exchanges and queues: what the
    /// recorded set must equal (tests compare the two), and what the catalog's snapshot holds.
    pub(crate) fn durable_definitions(&self) -> Definitions {
        let mut definitions = Definitions::default();
        for exchange in self.exchanges() {
            let d = exchange.definition();
            if d.durable && !is_standard_exchange(&d.name) {
                definitions.exchanges.push(exchange_record(d));
            }
            definitions.bindings.extend(exchange.bindings().iter().filter_map(|b| self.binding_record(&exchange, b)));
        }
        definitions.queues =
            self.queues().iter().filter(|q| is_stored(q.definition())).map(|q| queue_record(q)).collect();
        definitions
    }
}

/// A durable exchange's record.
pub(super) fn exchange_record(d: &ExchangeDefinition) -> ExchangeRecord {
    ExchangeRecord {
        name: d.name.clone(),
        kind: d.type_name().to_string(),
        auto_delete: d.auto_delete,
        internal: d.internal,
        arguments: d.arguments.clone(),
    }
}

/// A durable queue's record (where it lives, if not here).
pub(super) fn queue_record(queue: &Queue) -> QueueRecord {
    let d = queue.definition();
    QueueRecord {
        name: d.name.clone(),
        auto_delete: d.auto_delete,
        arguments: d.arguments.clone(),
        homes: queue.homes().map(<[u64]>::to_vec).unwrap_or_default(),
    }
}

/// Makes a recorded change durable (the journal is synced) so that it holds up no other
/// client: on a multi-thread runtime the worker thread first hands its other tasks to another
/// worker, so one tenant declaring thousands of durable queues never stalls another tenant's
/// confirms. Elsewhere (a current-thread runtime, or no runtime) it just runs.
pub(super) fn durable(pending: PendingChange) -> BrokerResult<()> {
    if pending.is_empty() {
        // Nothing to sync: handing the worker's tasks over would only cost a thread.
        return Ok(());
    }
    warren_storage::blocking_io::run(|| pending.wait().map_err(|e| internal_error("cannot save definitions", e)))
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

/// A stored queue's definition.
fn queue_definition(record: &QueueRecord) -> QueueDefinition {
    QueueDefinition {
        name: record.name.clone(),
        durable: true,
        exclusive_owner: None,
        auto_delete: record.auto_delete,
        arguments: record.arguments.clone(),
    }
}

/// The names of the exchanges and queues being restored, which a binding's ends must be
/// among: looked up, not searched (100,000 bindings to as many queues).
struct KeptEnds<'a> {
    exchanges: HashSet<&'a str>,
    queues: HashSet<&'a str>,
}

impl<'a> KeptEnds<'a> {
    fn of(exchanges: &'a [ExchangeRecord], queues: &'a [QueueRecord]) -> Self {
        KeptEnds {
            exchanges: exchanges.iter().map(|e| e.name.as_str()).collect(),
            queues: queues.iter().map(|q| q.name.as_str()).collect(),
        }
    }
}

/// Why a stored binding cannot be restored: its source or destination is not restored.
fn missing_end(record: &BindingRecord, kept: &KeptEnds<'_>, left_out: &[LeftOut]) -> Option<String> {
    let exchange_kept = |name: &str| is_standard_exchange(name) || kept.exchanges.contains(name);
    let queue_kept = |name: &str| kept.queues.contains(name);
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
