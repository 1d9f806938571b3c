//! RabbitMQ's Stream protocol (the binary protocol of its stream plugin, port 5552), served
//! over the broker's stream logs: the same streams 0-9-1 clients read by offset.
//!
//! The codec is written from the protocol's reference (RabbitMQ's `PROTOCOL.adoc`):
//! [`wire`] (its primitive types), [`frame`] (size-prefixed frames), [`command`] (keys,
//! versions, response codes), [`request`] (what clients send), [`response`] and [`chunk`]
//! (what the server sends), [`amqp10`] (the messages, AMQP 1.0 encoded, and their 0-9-1
//! form). The front end: [`listener`], [`connection`] (the handshake), `handlers` (the
//! commands), [`publisher`], [`subscription`] and the writer ([`outbound`]).

pub mod amqp10;
pub mod chunk;
pub mod command;
pub mod connection;
pub mod frame;
mod handlers;
pub mod listener;
pub mod outbound;
pub mod publisher;
pub mod request;
pub mod response;
pub mod settings;
mod stream_arguments;
pub mod sub_entry;
pub mod subscription;
pub mod wire;

pub use settings::StreamSettings;
