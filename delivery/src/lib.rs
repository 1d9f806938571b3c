//! warren-delivery: the broker core.
//!
//! Virtual hosts, exchanges and routing, queues, consumers, QoS and acknowledgements. It knows
//! AMQP's semantics (reply codes, properties, field tables) but nothing of sockets or frames:
//! the protocol layer calls into it and receives deliveries through [`DeliverySink`].

pub mod access;
pub mod broker;
pub mod catalog;
pub mod client_text;
pub mod clock;
pub mod connection_id;
pub mod connections;
pub mod dead_letter;
pub mod dedup_window;
pub mod definitions;
pub mod direct_reply_to;
mod equivalence;
pub mod error;
pub mod exchange;
pub mod feature_flags;
pub mod field_table;
mod field_value;
pub mod home_node;
pub(crate) mod limit_table;
pub mod message;
pub mod message_ref;
pub mod message_store;
pub mod node;
pub mod node_counters;
pub mod overflow;
pub mod policy;
pub mod properties;
pub mod publish_outcome;
pub mod queue;
pub mod quorum;
pub mod raft_adapter;
pub(crate) mod ready_list;
pub mod remote;
pub mod resource_alarm;
pub mod resource_usage;
pub mod scheduler;
pub mod session;
pub mod stream;
pub mod tag_filter;
pub mod timing_wheel;
pub mod user_limits;
pub mod vhost;
pub mod vhost_limits;

pub use broker::{Broker, DEFAULT_VHOST};
pub use connection_id::ConnectionId;
pub use error::{BrokerError, BrokerResult, ReplyCode};
pub use message::Message;
pub use properties::{Properties, PropertiesError};
pub use queue::consumer::{Consumer, ConsumerOptions};
pub use queue::{GetResult, Queue, QueueDefinition, Reply};
pub use session::{Delivery, DeliverySink, ReplyDelivery, Session, SessionId};
pub use vhost::VirtualHost;
pub use warren_storage::latency;
/// The storage layer's cache of open segment files, for the metrics.
pub use warren_storage::{max_open_segment_files, open_segment_files};
