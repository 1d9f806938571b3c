//! The one way a front end (a channel, the management API) changes definitions: [`change_for`]
//! makes a [`DefinitionOp`] through the catalog (the catalog group: every node the server
//! starts has one, a node alone as a group of one); the front ends never ask which. What every
//! node does when it applies the group's entry is the same code ([`apply_here`]). A broker
//! built without a catalog (a library test) makes the change here at once, through that same
//! code; changes about the cluster itself (members, nodes) are the state machine's, and such
//! a broker refuses them. Exclusive queues are their connection's, on this node: changes
//! naming one stay here, checked against the connection that asks.

use super::command::{ChangeOutcome, ChangeResult, DefinitionOp};
use crate::connection_id::ConnectionId;
use crate::error::{BrokerError, BrokerResult, ReplyCode};
use crate::exchange::{Binding, Destination, ExchangeDefinition};
use crate::queue::{QueueDefinition, Reply};
use crate::vhost::{DeleteCondition, DeletedQueue, VirtualHost};
use amq_protocol::types::FieldTable;
use std::sync::Arc;

/// Definitions replicated by the cluster are never exclusive: no connection owns them.
pub(super) const ANYONE: ConnectionId = ConnectionId(0);

/// What a change made for a client leaves to its channel.
#[must_use = "dropping it cancels a deleted queue's consumers"]
pub struct Changed {
    /// What the `-ok` answers.
    pub outcome: ChangeOutcome,
    /// A queue deleted here, held until the `-ok` is out: its consumers are told after, as
    /// RabbitMQ does.
    pub deleted: Option<DeletedQueue>,
}

impl From<ChangeOutcome> for Changed {
    fn from(outcome: ChangeOutcome) -> Self {
        Changed { outcome, deleted: None }
    }
}

/// Makes `op` in `vhost` for client connection `connection`: through the catalog (every node
/// then makes it; [`Reply::Later`], once it is applied here and on every reachable node), or
/// here at once on a broker without one ([`Reply::Now`]). A change naming an exclusive queue of
/// this node stays here. A `queue.delete` with `if-unused` or `if-empty` is checked where the
/// queue lives (a stand-in knows only this node's clients), then made alike everywhere.
pub fn change_for(
    vhost: &Arc<VirtualHost>,
    op: DefinitionOp,
    connection: ConnectionId,
) -> Reply<BrokerResult<Changed>> {
    let Some(catalog) = vhost.catalog().filter(|_| !stays_here(vhost, &op)) else {
        return Reply::Now(make_here(vhost, &op, connection));
    };
    let vhost = Arc::clone(vhost);
    Reply::Later(Box::pin(async move {
        let op = match op {
            DefinitionOp::DeleteQueue { name, if_unused, if_empty } => {
                let condition = DeleteCondition { if_unused, if_empty };
                check_at_home(&vhost, &name, condition).await?;
                DefinitionOp::DeleteQueue { name, if_unused: false, if_empty: false }
            }
            op => op,
        };
        catalog.change_holding(vhost.name(), op).await
    }))
}

/// [`change_for`] on behalf of no connection (the management API), awaited.
pub async fn change(vhost: &Arc<VirtualHost>, op: DefinitionOp) -> BrokerResult<ChangeOutcome> {
    change_for(vhost, op, ANYONE).wait().await.map(|changed| changed.outcome)
}

/// Whether `op` names an exclusive queue of this node: it is its connection's, and the change
/// stays here.
fn stays_here(vhost: &VirtualHost, op: &DefinitionOp) -> bool {
    let queue = match op {
        DefinitionOp::DeleteQueue { name, .. } => name,
        DefinitionOp::Bind { destination, to_exchange: false, .. }
        | DefinitionOp::Unbind { destination, to_exchange: false, .. } => destination,
        _ => return false,
    };
    vhost.queue(queue).is_ok_and(|queue| queue.definition().exclusive_owner.is_some())
}

/// `op` made here for `connection`.
fn make_here(vhost: &VirtualHost, op: &DefinitionOp, connection: ConnectionId) -> BrokerResult<Changed> {
    if let DefinitionOp::DeleteQueue { name, if_unused, if_empty } = op {
        let deleted = vhost.delete_queue(name, *if_unused, *if_empty, connection)?;
        let outcome = ChangeOutcome { message_count: deleted.message_count, consumer_count: 0 };
        return Ok(Changed { outcome, deleted: Some(deleted) });
    }
    match apply_here(vhost, op, connection) {
        Some(result) => result.map(Changed::from),
        None => Err(BrokerError::new(ReplyCode::NotAllowed, "this node is not in a cluster: there is no other node")),
    }
}

/// Checks `condition` of queue `name` where it lives (its counts, asked of its home node).
async fn check_at_home(vhost: &VirtualHost, name: &str, condition: DeleteCondition) -> BrokerResult<()> {
    if condition.if_unused || condition.if_empty {
        if let Ok(queue) = vhost.queue(name) {
            let (messages, consumers) = queue.counts().wait().await?;
            condition.check(vhost.name(), name, consumers, messages)?;
        }
    }
    Ok(())
}

/// Applies `op` to `vhost` as a node-local change for `connection`; `None` for the changes
/// that are not one (queue declares in a cluster decide where the queue lives; members and
/// nodes). What every node does with the catalog group's entry, for [`ANYONE`].
pub(super) fn apply_here(vhost: &VirtualHost, op: &DefinitionOp, connection: ConnectionId) -> Option<ChangeResult> {
    let outcome = match op {
        DefinitionOp::DeclareExchange { name, kind, durable, auto_delete, internal, arguments } => {
            ExchangeDefinition::declared(name, kind, *durable, *auto_delete, *internal, arguments.clone())
                .and_then(|definition| vhost.declare_exchange(definition))
                .map(|()| ChangeOutcome::default())
        }
        DefinitionOp::DeleteExchange { name, if_unused } => {
            vhost.delete_exchange(name, *if_unused).map(|()| ChangeOutcome::default())
        }
        DefinitionOp::DeclareQueue { name, durable, auto_delete, arguments, members: None } => {
            let definition = QueueDefinition {
                name: name.clone(),
                durable: *durable,
                exclusive_owner: None,
                auto_delete: *auto_delete,
                arguments: arguments.clone(),
            };
            vhost.declare_proposed_queue(definition, connection).map(|declared| ChangeOutcome {
                message_count: declared.message_count,
                consumer_count: declared.consumer_count,
            })
        }
        DefinitionOp::DeleteQueue { name, if_unused, if_empty } => vhost
            .delete_queue(name, *if_unused, *if_empty, connection)
            .map(|deleted| ChangeOutcome { message_count: deleted.message_count, consumer_count: 0 }),
        DefinitionOp::Bind { source, destination, to_exchange, routing_key, arguments } => {
            let binding = binding(destination, *to_exchange, routing_key, arguments);
            vhost.bind(source, binding, connection).map(|()| ChangeOutcome::default())
        }
        DefinitionOp::Unbind { source, destination, to_exchange, routing_key, arguments } => {
            let binding = binding(destination, *to_exchange, routing_key, arguments);
            vhost.unbind(source, &binding, connection).map(|()| ChangeOutcome::default())
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
