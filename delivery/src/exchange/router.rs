//! [`Router`]: how an exchange type indexes its bindings and picks a message's destinations.
//! Each type is a file of its own (`direct`, `fanout`, `topic`, `headers`); a super stream is
//! a direct router wrapped by `super_stream::SuperStreamRouter`. The exchange keeps the
//! bindings themselves ([`BindingTable`]), hands them to its router where it needs them, and
//! picks the router for its type.

use super::binding_table::BindingTable;
use super::{Binding, Destination};
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
