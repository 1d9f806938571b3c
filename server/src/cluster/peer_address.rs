//! Node names and peer addresses as the configuration gives them: `name@host:port`.
//!
//! A node name usually holds an `@` itself (`warren@host-a`), so a peer entry is split at its
//! last `@`: `warren@host-a@10.0.0.1:25672` is node `warren@host-a` at `10.0.0.1:25672`. The
//! host is resolved when the peer is dialled, so it may be a DNS name.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Longest node or cluster name, in bytes.
pub const MAX_NAME_BYTES: usize = 255;

/// A name (node or cluster) that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Empty.
    #[error("the name is empty")]
    Empty,
    /// Longer than [`MAX_NAME_BYTES`].
    #[error("the name is {0} bytes long; at most {MAX_NAME_BYTES} are allowed")]
    TooLong(usize),
    /// Holds whitespace, a control character or a comma (the list separator).
    #[error("the name holds whitespace, a control character or a comma")]
    BadCharacter,
}

/// Checks a node or cluster name: 1 to [`MAX_NAME_BYTES`] bytes, no whitespace, control
/// character or comma.
pub fn check_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(NameError::TooLong(name.len()));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control() || c == ',') {
        return Err(NameError::BadCharacter);
    }
    Ok(())
}

/// A peer from the seed list: its node name and where to dial it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PeerAddress {
    /// The peer's node name, as it announces itself in the handshake.
    pub name: String,
    /// `host:port`, resolved at each dial.
    pub address: String,
}

/// A peer entry that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerAddressError {
    /// No `@` between the name and the address.
    #[error("{0:?} is not name@host:port")]
    Shape(String),
    /// The name part is not a valid node name.
    #[error("bad node name in {entry:?}: {source}")]
    Name {
        /// The entry.
        entry: String,
        /// What is wrong with the name.
        source: NameError,
    },
    /// The address part is not `host:port` with a port from 1 to 65535.
    #[error("bad address in {0:?}: expected host:port with a port from 1 to 65535")]
    Address(String),
}

impl FromStr for PeerAddress {
    type Err = PeerAddressError;

    fn from_str(entry: &str) -> Result<Self, Self::Err> {
        let entry = entry.trim();
        let (name, address) = entry.rsplit_once('@').ok_or_else(|| PeerAddressError::Shape(entry.to_string()))?;
        check_name(name).map_err(|source| PeerAddressError::Name { entry: entry.to_string(), source })?;
        let (host, port) = address.rsplit_once(':').ok_or_else(|| PeerAddressError::Address(entry.to_string()))?;
        let port_ok = port.parse::<u16>().is_ok_and(|p| p != 0);
        if host.is_empty() || !port_ok || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(PeerAddressError::Address(entry.to_string()));
        }
        Ok(PeerAddress { name: name.to_string(), address: address.to_string() })
    }
}

impl TryFrom<String> for PeerAddress {
    type Error = PeerAddressError;

    fn try_from(entry: String) -> Result<Self, Self::Error> {
        entry.parse()
    }
}

impl From<PeerAddress> for String {
    fn from(peer: PeerAddress) -> String {
        peer.to_string()
    }
}

impl fmt::Display for PeerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_split_at_the_last_at_sign() {
        let peer: PeerAddress = "warren@a@127.0.0.1:25672".parse().expect("valid");
        assert_eq!(peer.name, "warren@a");
        assert_eq!(peer.address, "127.0.0.1:25672");
        assert_eq!(peer.to_string(), "warren@a@127.0.0.1:25672");
        let peer: PeerAddress = "b@[::1]:4000".parse().expect("ipv6");
        assert_eq!((peer.name.as_str(), peer.address.as_str()), ("b", "[::1]:4000"));
        let peer: PeerAddress = "c@node-c.example:4000".parse().expect("dns host");
        assert_eq!(peer.address, "node-c.example:4000");
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        assert!(matches!("127.0.0.1:4000".parse::<PeerAddress>(), Err(PeerAddressError::Shape(_))));
        assert!(matches!("@127.0.0.1:4000".parse::<PeerAddress>(), Err(PeerAddressError::Name { .. })));
        assert!(matches!("a@127.0.0.1".parse::<PeerAddress>(), Err(PeerAddressError::Address(_))));
        assert!(matches!("a@127.0.0.1:0".parse::<PeerAddress>(), Err(PeerAddressError::Address(_))));
        assert!(matches!("a@:4000".parse::<PeerAddress>(), Err(PeerAddressError::Address(_))));
        assert!(matches!("a@h:99999".parse::<PeerAddress>(), Err(PeerAddressError::Address(_))));
        assert_eq!(check_name(&"x".repeat(MAX_NAME_BYTES + 1)), Err(NameError::TooLong(MAX_NAME_BYTES + 1)));
        assert_eq!(check_name("a b"), Err(NameError::BadCharacter));
    }
}
