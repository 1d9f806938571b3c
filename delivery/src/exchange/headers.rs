//! The `headers` exchange type: a binding's arguments matched against a message's headers
//! (`x-match` all or any), each binding compiled once into a [`HeadersMatcher`].

use super::binding_table::BindingTable;
use super::headers_match::HeadersMatcher;
use super::router::Router;
use super::{Binding, Destination};
use crate::error::BrokerResult;
use crate::message::Message;

/// Every binding's matcher, in binding order.
#[derive(Debug, Default)]
pub(super) struct HeadersRouter {
    matchers: Vec<(HeadersMatcher, Destination)>,
}

impl Router for HeadersRouter {
    fn bind(&mut self, binding: &Binding, _bound: &BindingTable) -> BrokerResult<()> {
        self.matchers.push((HeadersMatcher::compile(&binding.arguments)?, binding.destination.clone()));
        Ok(())
    }

    fn unbind(&mut self, binding: &Binding, _remaining: &BindingTable) {
        let Ok(matcher) = HeadersMatcher::compile(&binding.arguments) else { return };
        if let Some(i) = self.matchers.iter().position(|(m, d)| m == &matcher && d == &binding.destination) {
            self.matchers.remove(i);
        }
    }

    fn route(&self, message: &Message, _bound: &BindingTable, out: &mut Vec<Destination>) {
        let headers = message.properties.headers();
        out.extend(self.matchers.iter().filter(|(m, _)| m.matches(headers)).map(|(_, d)| d.clone()));
    }
}
