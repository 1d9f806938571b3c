//! The `direct` exchange type: a message goes to the bindings whose key is its routing key.

use super::binding_table::BindingTable;
use super::router::Router;
use super::{Binding, Destination};
use crate::error::BrokerResult;
use crate::message::Message;
use std::collections::HashMap;

/// Destinations by binding key.
#[derive(Debug, Default)]
pub(super) struct DirectRouter {
    by_key: HashMap<String, Vec<Destination>>,
}

impl Router for DirectRouter {
    fn bind(&mut self, binding: &Binding, _bound: &BindingTable) -> BrokerResult<()> {
        self.by_key.entry(binding.routing_key.clone()).or_default().push(binding.destination.clone());
        Ok(())
    }

    fn unbind(&mut self, binding: &Binding, _remaining: &BindingTable) {
        let Some(list) = self.by_key.get_mut(&binding.routing_key) else { return };
        if let Some(i) = list.iter().position(|d| d == &binding.destination) {
            list.remove(i);
        }
        if list.is_empty() {
            self.by_key.remove(&binding.routing_key);
        }
    }

    fn route(&self, message: &Message, _bound: &BindingTable, out: &mut Vec<Destination>) {
        if let Some(list) = self.by_key.get(message.routing_key.as_str()) {
            out.extend(list.iter().cloned());
        }
    }
}
