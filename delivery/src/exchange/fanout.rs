//! The `fanout` exchange type: a message goes to every binding; it needs no index.

use super::binding_table::BindingTable;
use super::router::Router;
use super::{Binding, Destination};
use crate::error::BrokerResult;
use crate::message::Message;

/// Every bound destination.
#[derive(Debug, Default)]
pub(super) struct FanoutRouter;

impl Router for FanoutRouter {
    fn bind(&mut self, _binding: &Binding, _bound: &BindingTable) -> BrokerResult<()> {
        Ok(())
    }

    fn unbind(&mut self, _binding: &Binding, _remaining: &BindingTable) {}

    fn route(&self, _message: &Message, bound: &BindingTable, out: &mut Vec<Destination>) {
        out.extend(bound.iter().map(|b| b.destination.clone()));
    }
}
