//! warren-amqp: the AMQP 0-9-1 wire protocol.
//!
//! Frames and methods (with amq-protocol), content assembly, and the connection and channel
//! state machines. It turns bytes into calls on the broker core (warren-delivery), and
//! deliveries back into bytes. It knows nothing of files or configuration sources.

mod authorization;
pub mod channel;
pub mod config;
pub mod connection;
pub mod connection_context;
pub mod content;
pub mod frame;
mod hot_methods;
pub mod listener;
mod login;
pub mod outbox;
pub mod pending_reply;
pub mod publish;
mod publisher_block;
pub mod sasl;
pub mod server_properties;
mod table_fields;
#[cfg(test)]
mod test_client;
pub mod tls;
mod write_batch;

pub use config::ProtocolConfig;
