//! A definition change made on one node's virtual host: what every node does when it applies
//! the metadata group's entry, and what a broker without a cluster does at once. Changes
//! about the cluster itself (members, nodes) are the state machine's; a broker on its own
//! refuses them.

use super::command::{DefinitionOp, MetaOutcome, MetaResult};
use crate::error::{BrokerError, BrokerResult, ReplyCode};
use crate::exchange::{Binding, Destination, ExchangeDefinition};
use crate::queue::{ConnectionId, QueueDefinition};
use crate::vhost::{DeleteCondition, VirtualHost};
use amq_protocol::types::FieldTable;
use std::sync::Arc;

/// Definitions replicated by the cluster are never exclusive: no connection owns them.
const ANYONE: ConnectionId = ConnectionId(0);

/// Makes `op` in `vhost`: through the cluster's metadata group when this node is in one
/// (every node then makes it), here at once otherwise. The management API's declares,
/// deletes and binds go through here, as the AMQP methods do through their channel.
pub async fn change(vhost: &Arc<VirtualHost>, op: DefinitionOp) -> BrokerResult<MetaOutcome> {
    match vhost.metadata() {
        Some(metadata) => metadata.change(vhost.name(), op).await,
        None => apply_here(vhost, &op).unwrap_or_else(|| {
            Err(BrokerError::new(ReplyCode::NotAllowed, "this node is not in a cluster: there is no other node"))
        }),
    }
}

/// Deletes queue `name` of `vhost` as [`change`] does, if `condition` holds of it. Where it
/// lives decides the condition (a stand-in here knows only this node's clients: its home
/// node's counts are asked), and then every node deletes it alike. The messages it held.
pub async fn delete_queue(vhost: &Arc<VirtualHost>, name: &str, condition: DeleteCondition) -> BrokerResult<u32> {
    if condition.if_unused || condition.if_empty {
        if let Ok(queue) = vhost.queue(name) {
            let (messages, consumers) = queue.counts().wait().await?;
            condition.check(vhost.name(), name, consumers, messages)?;
        }
    }
    let op = DefinitionOp::DeleteQueue { name: name.to_string(), if_unused: false, if_empty: false };
    Ok(change(vhost, op).await?.message_count)
}

/// Applies `op` to `vhost` as a node-local change; `None` for the changes that are not one
/// (queue declares in a cluster decide where the queue lives; members and nodes).
pub(super) fn apply_here(vhost: &VirtualHost, op: &DefinitionOp) -> Option<MetaResult> {
    let outcome = match op {
        DefinitionOp::DeclareExchange { name, kind, durable, auto_delete, internal, arguments } => {
            ExchangeDefinition::declared(name, kind, *durable, *auto_delete, *internal, arguments.clone())
                .and_then(|definition| vhost.declare_exchange(definition))
                .map(|()| MetaOutcome::default())
        }
        DefinitionOp::DeleteExchange { name, if_unused } => {
            vhost.delete_exchange(name, *if_unused).map(|()| MetaOutcome::default())
        }
        DefinitionOp::DeclareQueue { name, durable, auto_delete, arguments, members: None } => {
            let definition = QueueDefinition {
                name: name.clone(),
                durable: *durable,
                exclusive_owner: None,
                auto_delete: *auto_delete,
                arguments: arguments.clone(),
            };
            vhost.declare_proposed_queue(definition, ANYONE).map(|declared| MetaOutcome {
                message_count: declared.message_count,
                consumer_count: declared.consumer_count,
            })
        }
        DefinitionOp::DeleteQueue { name, if_unused, if_empty } => vhost
            .delete_queue(name, *if_unused, *if_empty, ANYONE)
            .map(|deleted| MetaOutcome { message_count: deleted.message_count, consumer_count: 0 }),
        DefinitionOp::Bind { source, destination, to_exchange, routing_key, arguments } => {
            let binding = binding(destination, *to_exchange, routing_key, arguments);
            vhost.bind(source, binding, ANYONE).map(|()| MetaOutcome::default())
        }
        DefinitionOp::Unbind { source, destination, to_exchange, routing_key, arguments } => {
            let binding = binding(destination, *to_exchange, routing_key, arguments);
            vhost.unbind(source, &binding, ANYONE).map(|()| MetaOutcome::default())
        }
        DefinitionOp::DeclareQueue { members: Some(_), .. }
        | DefinitionOp::AddMember { .. }
        | DefinitionOp::DeleteMember { .. }
        | DefinitionOp::ForgetNode { .. }
        | DefinitionOp::AddNode { .. }
        | DefinitionOp::DeclareReplicatedExchange { .. }
        | DefinitionOp::SetMachineVersion { .. }
        | DefinitionOp::Access(_) => return None,
    };
    Some(outcome)
}

fn binding(destination: &str, to_exchange: bool, routing_key: &str, arguments: &FieldTable) -> Binding {
    let destination =
        if to_exchange { Destination::Exchange(destination.into()) } else { Destination::Queue(destination.into()) };
    Binding { destination, routing_key: routing_key.to_string(), arguments: arguments.clone() }
}
