//! The commands of the Stream protocol, by key, with the versions Warren speaks of each (what
//! `ExchangeCommandVersions` answers), and the response codes.
//!
//! One table ([`COMMANDS`]) says which commands exist, in which direction and at which
//! versions; decoding, the version exchange and the docs follow from it.

/// A response's key is its request's with this bit set.
pub const RESPONSE_BIT: u16 = 0x8000;

/// Who sends a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The client sends it (and the server answers, if it expects a response).
    FromClient,
    /// The server sends it.
    FromServer,
    /// Either side.
    Both,
}

/// One command of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandSpec {
    /// Its key (a request's; the response sets [`RESPONSE_BIT`]).
    pub key: u16,
    /// Its name in RabbitMQ's protocol reference.
    pub name: &'static str,
    /// Who sends it.
    pub direction: Direction,
    /// The oldest version Warren reads or writes.
    pub min_version: u16,
    /// The newest.
    pub max_version: u16,
}

macro_rules! commands {
    ($($constant:ident = $key:literal, $name:literal, $direction:ident, $min:literal..=$max:literal;)*) => {
        /// The commands' keys.
        pub mod key {
            $(#[doc = $name] pub const $constant: u16 = $key;)*
        }
        /// Every command Warren knows, in key order.
        pub const COMMANDS: &[CommandSpec] = &[
            $(CommandSpec { key: $key, name: $name, direction: Direction::$direction, min_version: $min, max_version: $max },)*
        ];
    };
}

commands! {
    DECLARE_PUBLISHER = 0x0001, "DeclarePublisher", FromClient, 1..=1;
    PUBLISH = 0x0002, "Publish", FromClient, 1..=2;
    PUBLISH_CONFIRM = 0x0003, "PublishConfirm", FromServer, 1..=1;
    PUBLISH_ERROR = 0x0004, "PublishError", FromServer, 1..=1;
    QUERY_PUBLISHER_SEQUENCE = 0x0005, "QueryPublisherSequence", FromClient, 1..=1;
    DELETE_PUBLISHER = 0x0006, "DeletePublisher", FromClient, 1..=1;
    SUBSCRIBE = 0x0007, "Subscribe", FromClient, 1..=1;
    DELIVER = 0x0008, "Deliver", FromServer, 1..=2;
    CREDIT = 0x0009, "Credit", FromClient, 1..=1;
    STORE_OFFSET = 0x000a, "StoreOffset", FromClient, 1..=1;
    QUERY_OFFSET = 0x000b, "QueryOffset", FromClient, 1..=1;
    UNSUBSCRIBE = 0x000c, "Unsubscribe", FromClient, 1..=1;
    CREATE = 0x000d, "Create", FromClient, 1..=1;
    DELETE = 0x000e, "Delete", FromClient, 1..=1;
    METADATA = 0x000f, "Metadata", FromClient, 1..=1;
    METADATA_UPDATE = 0x0010, "MetadataUpdate", FromServer, 1..=1;
    PEER_PROPERTIES = 0x0011, "PeerProperties", FromClient, 1..=1;
    SASL_HANDSHAKE = 0x0012, "SaslHandshake", FromClient, 1..=1;
    SASL_AUTHENTICATE = 0x0013, "SaslAuthenticate", FromClient, 1..=1;
    TUNE = 0x0014, "Tune", Both, 1..=1;
    OPEN = 0x0015, "Open", FromClient, 1..=1;
    CLOSE = 0x0016, "Close", Both, 1..=1;
    HEARTBEAT = 0x0017, "Heartbeat", Both, 1..=1;
    ROUTE = 0x0018, "Route", FromClient, 1..=1;
    PARTITIONS = 0x0019, "Partitions", FromClient, 1..=1;
    CONSUMER_UPDATE = 0x001a, "ConsumerUpdate", FromServer, 1..=1;
    EXCHANGE_COMMAND_VERSIONS = 0x001b, "ExchangeCommandVersions", FromClient, 1..=1;
    STREAM_STATS = 0x001c, "StreamStats", FromClient, 1..=1;
    CREATE_SUPER_STREAM = 0x001d, "CreateSuperStream", FromClient, 1..=1;
    DELETE_SUPER_STREAM = 0x001e, "DeleteSuperStream", FromClient, 1..=1;
}

/// The command with `key` (a request's key: the response bit clear).
pub fn spec(key: u16) -> Option<&'static CommandSpec> {
    COMMANDS.binary_search_by_key(&key, |spec| spec.key).ok().map(|index| &COMMANDS[index])
}

/// The response codes of the protocol, as RabbitMQ numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ResponseCode {
    /// Done.
    Ok = 0x01,
    /// No stream of that name (in the connection's vhost).
    StreamDoesNotExist = 0x02,
    /// The subscription id is taken on this connection.
    SubscriptionIdAlreadyExists = 0x03,
    /// No subscription with that id.
    SubscriptionIdDoesNotExist = 0x04,
    /// Create of a stream that exists with other arguments.
    StreamAlreadyExists = 0x05,
    /// The stream exists but cannot serve now (no leader, being deleted).
    StreamNotAvailable = 0x06,
    /// A SASL mechanism the server does not offer.
    SaslMechanismNotSupported = 0x07,
    /// Wrong user name or password.
    AuthenticationFailure = 0x08,
    /// Malformed SASL data.
    SaslError = 0x09,
    /// The mechanism needs another round.
    SaslChallenge = 0x0a,
    /// The user may connect from loopback only (guest).
    SaslAuthenticationFailureLoopback = 0x0b,
    /// The user may not use the vhost, or it does not exist.
    VirtualHostAccessFailure = 0x0c,
    /// A frame the server cannot read.
    UnknownFrame = 0x0d,
    /// A frame over the negotiated size.
    FrameTooLarge = 0x0e,
    /// The server failed.
    InternalError = 0x0f,
    /// The user lacks the permission.
    AccessRefused = 0x10,
    /// An argument or state the command does not allow.
    PreconditionFailed = 0x11,
    /// No publisher with that id.
    PublisherDoesNotExist = 0x12,
    /// No offset stored for that reference.
    NoOffset = 0x13,
}

impl ResponseCode {
    /// Its number on the wire.
    pub fn code(self) -> u16 {
        self as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_key_order_and_every_key_is_found() {
        assert!(COMMANDS.windows(2).all(|pair| pair[0].key < pair[1].key));
        for command in COMMANDS {
            assert_eq!(spec(command.key), Some(command));
            assert!(command.min_version <= command.max_version, "{}", command.name);
        }
        assert_eq!(spec(0x1f), None);
        assert_eq!(spec(key::PUBLISH).map(|s| s.max_version), Some(2));
    }
}
