//! The server properties announced in `connection.start`.

use amq_protocol::types::{AMQPValue, FieldTable, LongString};

/// Capabilities Warren implements, as RabbitMQ names them.
const CAPABILITIES: &[&str] = &[
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "authentication_failure_close",
    "per_consumer_qos",
    "direct_reply_to",
];

fn text(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

/// Product, version, platform and capabilities.
pub fn server_properties() -> FieldTable {
    let mut capabilities = FieldTable::default();
    for name in CAPABILITIES {
        capabilities.insert((*name).into(), AMQPValue::Boolean(true));
    }
    let mut props = FieldTable::default();
    props.insert("product".into(), text("Warren"));
    props.insert("version".into(), text(env!("CARGO_PKG_VERSION")));
    props.insert("platform".into(), text(&format!("Rust ({} {})", std::env::consts::OS, std::env::consts::ARCH)));
    props.insert("information".into(), text("An AMQP 0-9-1 broker on a durable log"));
    props.insert("capabilities".into(), AMQPValue::FieldTable(capabilities));
    props
}
