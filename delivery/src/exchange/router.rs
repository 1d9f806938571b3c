//! [`Router`]: how an exchange type indexes its bindings and picks a message's destinations.
//! Each type is a file of its own (`direct`, `fanout`, `topic`, `headers`); a super stream is
//! a direct router wrapped by [`super::super_stream::SuperStreamRouter`]. The exchange keeps the
//! bindings themselves ([`BindingTable`]) and hands them to its router where it needs them.

use super::binding_table::BindingTable;
use super::{Binding, Destination, ExchangeDefinition, ExchangeKind};
use crate::error::BrokerResult;
use crate::message::Message;

/// An exchange type's routing: an index over the exchange's bindings.
pub(super) trait Router: std::fmt::Debug + Send + Sync {
    /// Indexes `binding`, which is not yet among the exchange's `bound` ones; binding
    /// arguments the type cannot use are refused (406) and nothing is indexed.
    fn bind(&mut self, binding: &Binding, bound: &BindingTable) -> BrokerResult<()>;

    /// Forgets `binding`, removed from the exchange: `remaining` are the bindings left.
    fn unbind(&mut self, binding: &Binding, remaining: &BindingTable);

    /// Appends the destinations of `message` to `out` (possibly with repeats); `bound` are the
    /// exchange's bindings.
    fn route(&self, message: &Message, bound: &BindingTable, out: &mut Vec<Destination>);

    /// A super stream's partitions in order; `None` for every other exchange.
    fn partitions(&self) -> Option<&[Destination]> {
        None
    }
}

/// The router of an exchange declared as `definition`.
pub(super) fn router_for(definition: &ExchangeDefinition) -> Box<dyn Router> {
    let router: Box<dyn Router> = match definition.kind {
        ExchangeKind::Direct => Box::new(super::direct::DirectRouter::default()),
        ExchangeKind::Fanout => Box::new(super::fanout::FanoutRouter),
        ExchangeKind::Topic => Box::new(super::topic::TopicRouter::default()),
        ExchangeKind::Headers => Box::new(super::headers::HeadersRouter::default()),
    };
    match definition.kind == ExchangeKind::Direct && super::super_stream::is_super_stream(&definition.arguments) {
        true => Box::new(super::super_stream::SuperStreamRouter::new(router)),
        false => router,
    }
}
