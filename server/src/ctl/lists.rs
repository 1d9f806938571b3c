//! The list verbs (`list_queues`, `list_exchanges`, `list_bindings`, `list_connections`,
//! `list_channels`, `list_consumers`, `list_users`, `list_vhosts`, `list_permissions`,
//! `list_user_permissions`, `list_vhost_limits`, `list_policies`, `list_operator_policies`, `list_topic_permissions`,
//! `list_user_limits`, `list_global_parameters`, `list_stream_consumers`,
//! `list_stream_consumer_groups`, `list_stream_group_consumers`):
//! rabbitmqctl's names for
//! the columns, read from the API's JSON; any of them may be asked for, in any order.

use super::client::{encode, Client};
use super::output::{print, Format};
use super::CtlError;
use serde_json::Value;

/// What one list verb lists.
pub struct Listing {
    /// The API path; `{scope}` stands for the encoded virtual host (the user, for
    /// `list_user_permissions`).
    path: &'static str,
    /// The columns shown when none are asked for (rabbitmqctl's).
    defaults: &'static [&'static str],
    /// Every column: its name and where it is in an item (dotted; `=text` for a constant).
    columns: &'static [(&'static str, &'static str)],
}

/// `list_queues`.
pub const QUEUES: Listing = Listing {
    path: "/api/queues/{scope}",
    defaults: &["name", "messages"],
    columns: &[
        ("name", "name"),
        ("type", "type"),
        ("durable", "durable"),
        ("auto_delete", "auto_delete"),
        ("exclusive", "exclusive"),
        ("arguments", "arguments"),
        ("messages", "messages"),
        ("messages_ready", "messages_ready"),
        ("messages_unacknowledged", "messages_unacknowledged"),
        ("consumers", "consumers"),
        ("state", "state"),
        ("node", "node"),
        ("leader", "leader"),
        ("members", "members"),
        ("publish_rate", "message_stats.publish_details.rate"),
        ("deliver_rate", "message_stats.deliver_get_details.rate"),
    ],
};

/// `list_exchanges`.
pub const EXCHANGES: Listing = Listing {
    path: "/api/exchanges/{scope}",
    defaults: &["name", "type"],
    columns: &[
        ("name", "name"),
        ("type", "type"),
        ("durable", "durable"),
        ("auto_delete", "auto_delete"),
        ("internal", "internal"),
        ("arguments", "arguments"),
    ],
};

/// `list_bindings`.
pub const BINDINGS: Listing = Listing {
    path: "/api/bindings/{scope}",
    defaults: &["source_name", "source_kind", "destination_name", "destination_kind", "routing_key", "arguments"],
    columns: &[
        ("source_name", "source"),
        ("source_kind", "=exchange"),
        ("destination_name", "destination"),
        ("destination_kind", "destination_type"),
        ("routing_key", "routing_key"),
        ("arguments", "arguments"),
        ("properties_key", "properties_key"),
    ],
};

/// `list_connections`.
pub const CONNECTIONS: Listing = Listing {
    path: "/api/connections",
    defaults: &["user", "peer_host", "peer_port", "state"],
    columns: &[
        ("name", "name"),
        ("user", "user"),
        ("vhost", "vhost"),
        ("peer_host", "peer_host"),
        ("peer_port", "peer_port"),
        ("host", "host"),
        ("port", "port"),
        ("state", "state"),
        ("protocol", "protocol"),
        ("channels", "channels"),
        ("auth_mechanism", "auth_mechanism"),
        ("recv_oct", "recv_oct"),
        ("send_oct", "send_oct"),
        ("connected_at", "connected_at"),
        ("client_properties", "client_properties"),
        ("timeout", "timeout"),
        ("frame_max", "frame_max"),
        ("channel_max", "channel_max"),
    ],
};

/// `list_channels`.
pub const CHANNELS: Listing = Listing {
    path: "/api/channels",
    defaults: &["name", "user", "consumer_count", "messages_unacknowledged"],
    columns: &[
        ("name", "name"),
        ("number", "number"),
        ("user", "user"),
        ("vhost", "vhost"),
        ("connection", "connection_details.name"),
        ("consumer_count", "consumer_count"),
        ("messages_unacknowledged", "messages_unacknowledged"),
        ("prefetch_count", "prefetch_count"),
        ("global_prefetch_count", "global_prefetch_count"),
    ],
};

/// `list_consumers`.
pub const CONSUMERS: Listing = Listing {
    path: "/api/consumers/{scope}",
    defaults: &["queue_name", "channel_name", "consumer_tag", "ack_required", "prefetch_count", "active", "arguments"],
    columns: &[
        ("queue_name", "queue.name"),
        ("channel_name", "channel_details.name"),
        ("consumer_tag", "consumer_tag"),
        ("ack_required", "ack_required"),
        ("prefetch_count", "prefetch_count"),
        ("exclusive", "exclusive"),
        ("active", "active"),
        ("activity_status", "activity_status"),
        ("arguments", "arguments"),
    ],
};

/// `list_users`.
pub const USERS: Listing =
    Listing { path: "/api/users", defaults: &["user", "tags"], columns: &[("user", "name"), ("tags", "tags")] };

/// `list_vhosts`.
pub const VHOSTS: Listing = Listing {
    path: "/api/vhosts",
    defaults: &["name"],
    columns: &[("name", "name"), ("description", "description"), ("messages", "messages"), ("tracing", "tracing")],
};

/// `list_permissions`: the permissions in the vhost.
pub const PERMISSIONS: Listing = Listing {
    path: "/api/vhosts/{scope}/permissions",
    defaults: &["user", "configure", "write", "read"],
    columns: &[("user", "user"), ("vhost", "vhost"), ("configure", "configure"), ("write", "write"), ("read", "read")],
};

/// `list_user_permissions USER`: the user's permissions in every vhost.
pub const USER_PERMISSIONS: Listing = Listing {
    path: "/api/users/{scope}/permissions",
    defaults: &["vhost", "configure", "write", "read"],
    columns: &[("vhost", "vhost"), ("configure", "configure"), ("write", "write"), ("read", "read")],
};

/// `list_vhost_limits`.
pub const VHOST_LIMITS: Listing = Listing {
    path: "/api/vhost-limits/{scope}",
    defaults: &["vhost", "limits"],
    columns: &[("vhost", "vhost"), ("limits", "value")],
};

/// `list_global_parameters`.
pub const GLOBAL_PARAMETERS: Listing = Listing {
    path: "/api/global-parameters",
    defaults: &["name", "value"],
    columns: &[("name", "name"), ("value", "value")],
};

/// `list_user_limits`.
pub const USER_LIMITS: Listing = Listing {
    path: "/api/user-limits",
    defaults: &["user", "limits"],
    columns: &[("user", "user"), ("limits", "value")],
};

/// `list_topic_permissions`.
pub const TOPIC_PERMISSIONS: Listing = Listing {
    path: "/api/vhosts/{scope}/topic-permissions",
    defaults: &["user", "exchange", "write", "read"],
    columns: &[("user", "user"), ("vhost", "vhost"), ("exchange", "exchange"), ("write", "write"), ("read", "read")],
};

/// The columns of `list_policies` and `list_operator_policies` (rabbitmqctl's, and which keys
/// change nothing in Warren).
const POLICY_COLUMNS: &[(&str, &str)] = &[
    ("vhost", "vhost"),
    ("name", "name"),
    ("pattern", "pattern"),
    ("apply-to", "apply-to"),
    ("definition", "definition"),
    ("priority", "priority"),
    ("no_effect", "no_effect"),
];

/// `list_policies`.
pub const POLICIES: Listing = Listing {
    path: "/api/policies/{scope}",
    defaults: &["vhost", "name", "pattern", "apply-to", "definition", "priority"],
    columns: POLICY_COLUMNS,
};

/// `list_operator_policies`.
pub const OPERATOR_POLICIES: Listing = Listing {
    path: "/api/operator-policies/{scope}",
    defaults: &["vhost", "name", "pattern", "apply-to", "definition", "priority"],
    columns: POLICY_COLUMNS,
};

/// `list_feature_flags`.
pub const FEATURE_FLAGS: Listing = Listing {
    path: "/api/feature-flags",
    defaults: &["name", "state"],
    columns: &[
        ("name", "name"),
        ("state", "state"),
        ("stability", "stability"),
        ("provided_by", "provided_by"),
        ("desc", "desc"),
        ("machine", "machine"),
        ("machine_version", "machine_version"),
    ],
};

/// `list_stream_consumers` (rabbitmq-streams' verb; Warren's consumers are named by tag and
/// channel, not by subscription id and connection process).
pub const STREAM_CONSUMERS: Listing = Listing {
    path: "/api/stream/consumers/{scope}",
    defaults: &[
        "connection_name",
        "stream",
        "consumer_tag",
        "offset",
        "offset_lag",
        "active",
        "activity_status",
        "properties",
    ],
    columns: &[
        ("connection_name", "connection_details.name"),
        ("channel", "channel_details.name"),
        ("stream", "queue.name"),
        ("vhost", "queue.vhost"),
        ("consumer_tag", "consumer_tag"),
        ("offset", "offset"),
        ("offset_lag", "offset_lag"),
        ("active", "active"),
        ("activity_status", "activity_status"),
        ("ack_required", "ack_required"),
        ("prefetch_count", "prefetch_count"),
        ("properties", "properties"),
    ],
};

/// `list_stream_consumer_groups` (rabbitmq-streams' verb): each group of each stream, per
/// partition of a super stream, with its committed offset and lag.
pub const STREAM_CONSUMER_GROUPS: Listing = Listing {
    path: "/api/stream/groups/{scope}",
    defaults: &["stream", "reference", "partition_index", "committed_offset", "last_offset", "offset_lag"],
    columns: STREAM_GROUP_COLUMNS,
};

const STREAM_GROUP_COLUMNS: &[(&str, &str)] = &[
    ("stream", "stream"),
    ("super_stream", "super_stream"),
    ("reference", "group"),
    ("partition_index", "partition"),
    ("committed_offset", "committed_offset"),
    ("last_offset", "last_offset"),
    ("offset_lag", "offset_lag"),
    ("vhost", "vhost"),
];

/// `list_stream_group_consumers` (rabbitmq-streams' verb): the consumers of one group, with
/// the partition each reads (items made by `streams::group_consumers`).
pub const STREAM_GROUP_CONSUMERS: Listing = Listing {
    path: "/api/stream/groups/{scope}",
    defaults: &["consumer_tag", "connection_name", "stream", "state", "offset"],
    columns: &[
        ("consumer_tag", "consumer_tag"),
        ("connection_name", "channel_details.connection_name"),
        ("channel", "channel_details.name"),
        ("stream", "stream"),
        ("partition_index", "partition"),
        ("state", "state"),
        ("offset", "offset"),
        ("reference", "group"),
    ],
};

/// The field at `path` (dots between names) of `item`; `=text` is the text itself.
fn read(item: &Value, path: &str) -> Value {
    if let Some(constant) = path.strip_prefix('=') {
        return Value::String(constant.to_string());
    }
    path.split('.').try_fold(item, |value, key| value.get(key)).cloned().unwrap_or(Value::Null)
}

/// Lists what `listing` lists in `vhost`, with `columns` (the defaults if none).
pub fn list(
    client: &Client,
    listing: &Listing,
    scope: &str,
    columns: &[String],
    format: Format,
) -> Result<(), CtlError> {
    let items = client.get(&listing.path.replace("{scope}", &encode(scope)))?;
    print_items(listing, &items.as_array().cloned().unwrap_or_default(), columns, format)
}

/// Prints `items`, of the kind `listing` lists, with `columns` (the defaults if none).
pub fn print_items(listing: &Listing, items: &[Value], columns: &[String], format: Format) -> Result<(), CtlError> {
    let columns: Vec<String> =
        if columns.is_empty() { listing.defaults.iter().map(|c| c.to_string()).collect() } else { columns.to_vec() };
    let paths = columns
        .iter()
        .map(|column| {
            listing.columns.iter().find(|(name, _)| name == column).map(|(_, path)| *path).ok_or_else(|| {
                let known: Vec<&str> = listing.columns.iter().map(|(name, _)| *name).collect();
                CtlError::Failed(format!("unknown column '{column}': the columns are {}", known.join(", ")))
            })
        })
        .collect::<Result<Vec<&str>, CtlError>>()?;
    print(format, &columns, items, |item, column| {
        let index = columns.iter().position(|c| c == column).unwrap_or(0);
        read(item, paths[index])
    });
    Ok(())
}
