//! AMQP 1.0 messages as the Stream protocol carries them: stream clients publish messages
//! encoded in the AMQP 1.0 message format (a sequence of described sections), and consumers
//! receive the same format. This module owns that format (the type system's values in
//! [`types`], their bounded decoder and encoder, the message sections in [`message`]) and its
//! mapping to and from the AMQP 0-9-1 messages Warren keeps in its stream logs, done as
//! RabbitMQ 3.13 does it ([`to_091`] and [`from_091`] list the field mapping).

pub mod decode;
pub mod encode;
pub mod error;
pub mod from_091;
pub mod message;
pub mod to_091;
pub mod types;

#[cfg(test)]
mod mapping_tests;
#[cfg(test)]
mod oracle_tests;
#[cfg(test)]
mod tests;

pub use error::Amqp10Error;
pub use from_091::amqp10_from_message;
pub use message::{Body, Header, Message, Properties};
pub use to_091::message_from_amqp10;
pub use types::Value;
