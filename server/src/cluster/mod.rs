//! The cluster's networking: node names and peer addresses, the shared secret, and the
//! inter-node transport (authenticated, length-delimited, multiplexed TCP connections, one
//! per pair of nodes) that Raft RPCs and forwarded client operations travel on.
//!
//! - [`peer_address`]: `name@host:port` entries of the seed list, name rules.
//! - [`secret`]: the shared secret file and its HMAC proofs.
//! - [`handshake`]: mutual proof of the secret, cluster name, node names, protocol version.
//! - [`transport`]: connections, dialling and backoff, requests, timeouts, back-pressure.
//! - [`inbox`]: what peers send, handed to the layer above.
//! - [`service`]: the broker's inter-node message types and the transport as `warren` runs it.

mod connection;
mod envelope;
pub mod frame;
pub mod handshake;
pub mod inbox;
pub mod peer_address;
pub mod secret;
pub mod service;
pub mod transport;

pub use envelope::RequestId;
pub use inbox::{Inbox, Incoming, IncomingRequest, Responder};
pub use peer_address::PeerAddress;
pub use secret::ClusterSecret;
pub use service::{ClusterTransport, PeerRequest, PeerResponse};
pub use transport::{Transport, TransportError, TransportSettings, Wire};
