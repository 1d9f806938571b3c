//! The raw engine (`--engine raw`, the default): warren-perf's own lean AMQP 0-9-1 data path,
//! so that what is measured is the broker rather than the client.
//!
//! Each producer and consumer owns one tokio `TcpStream` and one task: no I/O thread, no
//! channels between tasks, no per-message allocation. Reads are large (a 256 KiB buffer), and
//! the frames are cut out of the read buffer and decoded by hand ([`frame`]); writes are
//! batched (a producer encodes many publishes into one buffer, a consumer writes the acks of a
//! whole read at once). The handshake and the other methods sent once per connection
//! ([`connection`]) go through amq-protocol, as do the declarations (through lapin, in
//! `topology.rs`). What is counted and measured, and how, is shared with the lapin engine:
//! [`consumer`] and [`producer`] differ from theirs only in how bytes move.

mod connection;
pub mod consumer;
mod frame;
pub mod producer;

pub use consumer::Consumer;
pub use producer::Producer;
