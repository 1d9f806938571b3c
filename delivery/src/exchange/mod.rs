//! Exchanges: their definitions, their bindings, and routing a message to destinations.

mod binding_table;
pub mod delayed;
mod direct;
mod fanout;
mod headers;
mod headers_match;
pub mod replicated_delays;
mod router;
pub mod super_stream;
mod topic;
mod topic_trie;

pub use delayed::{DelayedMessages, HeldMessages};
pub use headers_match::HeadersMatcher;
pub use replicated_delays::ReplicatedDelays;
pub use topic_trie::TopicTrie;

use crate::error::{BrokerError, BrokerResult};
use crate::message::Message;
use amq_protocol::types::{AMQPValue, FieldTable};
use binding_table::BindingTable;
use parking_lot::RwLock;
use router::Router;
use std::sync::Arc;

/// The routing algorithm of an exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExchangeKind {
    /// Routing key equals binding key.
    Direct,
    /// Every bound destination.
    Fanout,
    /// Binding keys with `*` and `#` wildcards.
    Topic,
    /// Binding arguments against message headers.
    Headers,
}

impl ExchangeKind {
    /// Parses the `type` field of `exchange.declare`; unknown types are 503 COMMAND_INVALID.
    pub fn parse(kind: &str) -> BrokerResult<Self> {
        match kind {
            "direct" => Ok(ExchangeKind::Direct),
            "fanout" => Ok(ExchangeKind::Fanout),
            "topic" => Ok(ExchangeKind::Topic),
            "headers" => Ok(ExchangeKind::Headers),
            other => Err(BrokerError::command_invalid(format!("unknown exchange type '{other}'"))),
        }
    }

    /// The name clients use for this type.
    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeKind::Direct => "direct",
            ExchangeKind::Fanout => "fanout",
            ExchangeKind::Topic => "topic",
            ExchangeKind::Headers => "headers",
        }
    }
}

/// The type an exchange was declared with: how it routes, and whether it first holds each
/// message for its `x-delay` (the delayed-message plugin's type, `x-delayed-message`, which
/// routes by the kind its `x-delayed-type` argument names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExchangeType {
    /// Routes each message as it arrives.
    Routing(ExchangeKind),
    /// Holds each message for its `x-delay`, then routes it by the kind.
    Delayed(ExchangeKind),
}

/// The exchange type whose messages wait for their `x-delay` before routing.
pub const DELAYED_TYPE: &str = "x-delayed-message";

impl ExchangeType {
    /// The type of `exchange.declare`'s `type` field and arguments. An unknown type is 503;
    /// `x-delayed-message` without a valid `x-delayed-type` is 406.
    pub fn parse(type_name: &str, arguments: &FieldTable) -> BrokerResult<Self> {
        if type_name != DELAYED_TYPE {
            return ExchangeKind::parse(type_name).map(ExchangeType::Routing);
        }
        let routing = arguments.inner().get("x-delayed-type").and_then(crate::field_value::string_of);
        let routing = routing.map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
        let kind = ExchangeKind::parse(&routing).map_err(|_| {
            BrokerError::precondition_failed(format!(
                "invalid arg 'x-delayed-type': '{routing}' is not direct, fanout, topic or headers"
            ))
        })?;
        Ok(ExchangeType::Delayed(kind))
    }

    /// The name clients declare this type by.
    pub fn as_str(self) -> &'static str {
        match self {
            ExchangeType::Routing(kind) => kind.as_str(),
            ExchangeType::Delayed(_) => DELAYED_TYPE,
        }
    }

    /// How it routes (after the delay, for a delayed exchange).
    pub fn routing(self) -> ExchangeKind {
        match self {
            ExchangeType::Routing(kind) | ExchangeType::Delayed(kind) => kind,
        }
    }

    /// Whether messages wait for their `x-delay` before routing.
    pub fn is_delayed(self) -> bool {
        matches!(self, ExchangeType::Delayed(_))
    }
}

/// What `exchange.declare` asked for; compared field by field on redeclaration.
#[derive(Debug, Clone, PartialEq)]
pub struct ExchangeDefinition {
    /// The exchange's name.
    pub name: String,
    /// Its type: how it routes, and whether it holds messages first.
    pub kind: ExchangeType,
    /// Whether it survives a broker restart.
    pub durable: bool,
    /// Whether it is deleted when its last binding goes.
    pub auto_delete: bool,
    /// Whether clients may not publish to it directly.
    pub internal: bool,
    /// Declared arguments (`alternate-exchange`, ...).
    pub arguments: FieldTable,
}

impl ExchangeDefinition {
    /// A definition from `exchange.declare`'s type and arguments (see [`ExchangeType::parse`]).
    pub fn declared(
        name: &str,
        type_name: &str,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: FieldTable,
    ) -> BrokerResult<Self> {
        let kind = ExchangeType::parse(type_name, &arguments)?;
        Ok(ExchangeDefinition { name: name.to_string(), kind, durable, auto_delete, internal, arguments })
    }

    /// The type as declared.
    pub fn type_name(&self) -> &'static str {
        self.kind.as_str()
    }

    /// The `alternate-exchange` argument: where unroutable messages go.
    pub fn alternate_exchange(&self) -> Option<String> {
        alternate_exchange_of(&self.arguments)
    }
}

/// The `alternate-exchange` of declare arguments.
pub fn alternate_exchange_of(arguments: &FieldTable) -> Option<String> {
    match arguments.inner().get("alternate-exchange") {
        Some(AMQPValue::LongString(s)) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        Some(AMQPValue::ShortString(s)) => Some(s.to_string()),
        _ => None,
    }
}

/// Where a binding leads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Destination {
    /// A queue, by name.
    Queue(Arc<str>),
    /// Another exchange, by name (exchange-to-exchange binding).
    Exchange(Arc<str>),
}

/// One binding from an exchange to a destination.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// Where it leads.
    pub destination: Destination,
    /// The binding key.
    pub routing_key: String,
    /// The binding arguments (the headers exchange matches on them).
    pub arguments: FieldTable,
}

/// An exchange's bindings and its type's index over them.
#[derive(Debug)]
struct Bindings {
    all: BindingTable,
    router: Box<dyn Router>,
}

/// An exchange: its definition and its bindings.
#[derive(Debug)]
pub struct Exchange {
    definition: ExchangeDefinition,
    bindings: RwLock<Bindings>,
    delayed: Option<Arc<dyn HeldMessages>>,
}

impl Exchange {
    /// A new exchange with no bindings.
    pub fn new(definition: ExchangeDefinition) -> Self {
        let bindings = Bindings { all: BindingTable::default(), router: router_for(&definition) };
        Exchange { definition, bindings: RwLock::new(bindings), delayed: None }
    }

    /// A delayed exchange, holding its messages in `delayed`.
    pub fn with_delayed(definition: ExchangeDefinition, delayed: Arc<dyn HeldMessages>) -> Self {
        Exchange { delayed: Some(delayed), ..Self::new(definition) }
    }

    /// The messages it holds, for a delayed exchange.
    pub fn delayed(&self) -> Option<&Arc<dyn HeldMessages>> {
        self.delayed.as_ref()
    }

    /// Its definition.
    pub fn definition(&self) -> &ExchangeDefinition {
        &self.definition
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.definition.name
    }

    /// A super stream's partitions in order; `None` if it is not a super stream.
    pub fn partitions(&self) -> Option<Vec<Destination>> {
        self.bindings.read().router.partitions().map(<[Destination]>::to_vec)
    }

    /// Adds a binding; returns false if an identical one exists. Bad headers arguments are 406.
    pub fn bind(&self, binding: Binding) -> BrokerResult<bool> {
        let mut bindings = self.bindings.write();
        let Bindings { all, router } = &mut *bindings;
        if all.contains(&binding) {
            return Ok(false);
        }
        router.bind(&binding, all)?;
        all.insert(binding);
        Ok(true)
    }

    /// Whether this exact binding exists.
    pub fn is_bound(&self, binding: &Binding) -> bool {
        self.bindings.read().all.contains(binding)
    }

    /// Removes a binding; returns whether it existed.
    pub fn unbind(&self, binding: &Binding) -> bool {
        let mut bindings = self.bindings.write();
        let Bindings { all, router } = &mut *bindings;
        if !all.remove(binding) {
            return false;
        }
        router.unbind(binding, all);
        true
    }

    /// Removes every binding to `destination`; returns how many there were.
    pub fn unbind_destination(&self, destination: &Destination) -> usize {
        let doomed = self.bindings.read().all.to_destination(destination);
        doomed.iter().filter(|b| self.unbind(b)).count()
    }

    /// Number of bindings whose source is this exchange.
    pub fn binding_count(&self) -> usize {
        self.bindings.read().all.len()
    }

    /// A copy of this exchange's bindings.
    pub fn bindings(&self) -> Vec<Binding> {
        self.bindings.read().all.iter().cloned().collect()
    }

    /// Appends the destinations `message` is routed to (possibly with repeats).
    pub fn route(&self, message: &Message, out: &mut Vec<Destination>) {
        let bindings = self.bindings.read();
        bindings.router.route(message, &bindings.all, out);
    }
}

/// The router of an exchange declared as `definition`.
fn router_for(definition: &ExchangeDefinition) -> Box<dyn Router> {
    let kind = definition.kind.routing();
    let router: Box<dyn Router> = match kind {
        ExchangeKind::Direct => Box::new(direct::DirectRouter::default()),
        ExchangeKind::Fanout => Box::new(fanout::FanoutRouter),
        ExchangeKind::Topic => Box::new(topic::TopicRouter::default()),
        ExchangeKind::Headers => Box::new(headers::HeadersRouter::default()),
    };
    match kind == ExchangeKind::Direct && super_stream::is_super_stream(&definition.arguments) {
        true => Box::new(super_stream::SuperStreamRouter::new(router)),
        false => router,
    }
}
