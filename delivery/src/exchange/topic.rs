//! The `topic` exchange type: binding keys with `*` (one word) and `#` (any words) matched
//! against the routing key, through a [`TopicTrie`].

use super::binding_table::BindingTable;
use super::router::Router;
use super::topic_trie::TopicTrie;
use super::{Binding, Destination};
use crate::error::BrokerResult;
use crate::message::Message;

/// The binding keys' trie.
#[derive(Debug, Default)]
pub(super) struct TopicRouter {
    trie: TopicTrie<Destination>,
}

impl Router for TopicRouter {
    fn bind(&mut self, binding: &Binding, _bound: &BindingTable) -> BrokerResult<()> {
        self.trie.insert(&binding.routing_key, binding.destination.clone());
        Ok(())
    }

    fn unbind(&mut self, binding: &Binding, remaining: &BindingTable) {
        // Another binding with the same key and destination (other arguments) keeps it.
        if !remaining.routes(&binding.routing_key, &binding.destination) {
            self.trie.remove(&binding.routing_key, &binding.destination);
        }
    }

    fn route(&self, message: &Message, _bound: &BindingTable, out: &mut Vec<Destination>) {
        self.trie.matches(message.routing_key.as_str(), out);
    }
}
