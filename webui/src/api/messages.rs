//! Messages through the API: `POST /api/exchanges/{vhost}/{name}/publish`, `POST
//! /api/queues/{vhost}/{name}/get` (with RabbitMQ's `ackmode`s), and, an extension, replay by
//! offset: `GET /api/queues/{vhost}/{name}/messages?offset=&count=&max_bytes=&filter=
//! &timestamp=` reads a stream, or what a durable classic queue's log still holds, from an
//! offset (a number, `first`, `last`, or the first message at or after a timestamp) without
//! consuming anything.
//!
//! What a client can make these answers hold is bounded: `truncate` is capped at
//! [`MAX_TRUNCATE_BYTES`], and a replay stops adding messages once its JSON reaches
//! [`MAX_ANSWER_BYTES`] (`next_offset` says where to go on). Log reads run on the blocking
//! pool, [`MAX_CONCURRENT_LOG_READS`] at a time, so browsing never stalls AMQP clients.

use super::{exchange_name, Management};
use crate::authorization::{Caller, ObjectOp, Rule};
use crate::error::ApiError;
use crate::json_body::JsonBody;
use crate::message_json::{self, DEFAULT_TRUNCATE_BYTES};
use crate::route_table::RouteTable;
use amq_protocol::types::ShortString;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use warren_delivery::stream::OffsetSpec;
use warren_delivery::tag_filter::TagFilter;
use warren_delivery::{Delivery, DeliverySink, Message, QueueDefinition, ReplyDelivery, Session, VirtualHost};

/// Messages one replay request returns at most.
pub const MAX_REPLAY_COUNT: usize = 1_000;
/// Payload bytes one replay request reads from the log at most (one message always fits).
pub const MAX_REPLAY_BYTES: usize = 4 << 20;
/// Messages one get request takes at most.
const MAX_GET_COUNT: usize = 1_000;
/// Most payload bytes shown of one message, whatever `truncate` asks.
pub const MAX_TRUNCATE_BYTES: usize = 256 * 1024;
/// Bytes of JSON a replay or get answer grows to (about: one message always fits, and a get
/// stops taking messages once it is reached).
pub const MAX_ANSWER_BYTES: usize = 2 << 20;
/// Log reads running at once; more wait their turn.
pub const MAX_CONCURRENT_LOG_READS: usize = 2;

/// The message routes.
pub(super) fn routes(table: &mut RouteTable) {
    table
        .post("/api/exchanges/{vhost}/{name}/publish", Rule::Object(ObjectOp::Publish), publish)
        .post("/api/queues/{vhost}/{name}/get", Rule::Object(ObjectOp::ReadQueue), get_messages)
        .get("/api/queues/{vhost}/{name}/messages", Rule::Object(ObjectOp::ReadQueue), replay);
}

/// What `truncate` asks, within [`MAX_TRUNCATE_BYTES`].
fn truncation(asked: Option<usize>) -> usize {
    asked.unwrap_or(DEFAULT_TRUNCATE_BYTES).min(MAX_TRUNCATE_BYTES)
}

fn bad_request(text: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, text)
}

/// The body of a publish.
#[derive(Debug, Deserialize)]
struct PublishBody {
    #[serde(default)]
    routing_key: String,
    #[serde(default)]
    properties: Value,
    payload: String,
    #[serde(default)]
    payload_encoding: String,
}

/// Publishes one message, as `basic.publish` would; answers once it is as safe as its
/// queues promise, `{"routed": true}` if it reached one. A `user_id` property must name the
/// caller, as over AMQP.
async fn publish(
    caller: Caller,
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<PublishBody>,
) -> Result<Json<Value>, ApiError> {
    let host = api.vhost(&vhost)?;
    let exchange = exchange_name(&name);
    let properties = message_json::properties_from_json(&body.properties).map_err(bad_request)?;
    warren_delivery::access::check_user_id(&properties, &caller.user)?;
    let payload = message_json::payload_from_json(&body.payload, &body.payload_encoding).map_err(bad_request)?;
    let routing_key =
        ShortString::try_new(body.routing_key).map_err(|_| bad_request("routing_key is longer than 255 bytes"))?;
    let exchange_short =
        ShortString::try_new(exchange.to_string()).map_err(|_| bad_request("exchange name too long"))?;
    let message = Message { exchange: exchange_short, routing_key, properties, body: payload };
    let outcome = host.publish(exchange, Arc::new(message))?;
    if let Some(failure) = outcome.failure {
        return Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, failure.to_string()));
    }
    for mark in &outcome.marks {
        mark.wait().await.map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    }
    Ok(Json(json!({ "routed": outcome.routed })))
}

/// A channel of the API's own: it holds what a get takes until the get settles it.
struct Taken;

impl DeliverySink for Taken {
    fn deliver(&self, _delivery: Delivery) {}
    fn deliver_reply(&self, _reply: ReplyDelivery) {}
    fn consumer_cancelled(&self, _consumer_tag: &ShortString) {}
}

/// The session of one API request that takes messages, closed when the request ends however
/// it ends (a client that goes mid-request drops the handler): what it took and did not settle
/// goes back to its queue rather than staying unacknowledged.
struct ApiChannel(Arc<Session>);

impl ApiChannel {
    fn open(vhost: &Arc<VirtualHost>) -> Self {
        ApiChannel(Session::new(Arc::clone(vhost), Arc::new(Taken)))
    }
}

impl std::ops::Deref for ApiChannel {
    type Target = Arc<Session>;
    fn deref(&self) -> &Arc<Session> {
        &self.0
    }
}

impl Drop for ApiChannel {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// The body of a get.
#[derive(Debug, Deserialize)]
struct GetBody {
    #[serde(default = "one", deserialize_with = "crate::lenient::count")]
    count: usize,
    ackmode: String,
    #[serde(default)]
    encoding: String,
    #[serde(default, deserialize_with = "crate::lenient::optional_count")]
    truncate: Option<usize>,
}

fn one() -> usize {
    1
}

/// What `ackmode` does with the messages taken: `ack_requeue_false` acks them,
/// `reject_requeue_false` rejects them (dead-lettered if the queue says so), and the
/// `*_requeue_true` modes put them back, redelivered.
#[derive(Debug, Clone, Copy, PartialEq)]
enum AckMode {
    Ack,
    Reject,
    Requeue,
}

fn ack_mode(text: &str) -> Result<AckMode, ApiError> {
    match text {
        "ack_requeue_false" => Ok(AckMode::Ack),
        "reject_requeue_false" => Ok(AckMode::Reject),
        "ack_requeue_true" | "reject_requeue_true" => Ok(AckMode::Requeue),
        other => Err(bad_request(format!(
            "ackmode {other:?} is not one of ack_requeue_true, ack_requeue_false, reject_requeue_true, reject_requeue_false"
        ))),
    }
}

/// Takes up to `count` messages, then settles them all as `ackmode` says (so that a requeue
/// does not hand the same message back within one request), as RabbitMQ's API does.
async fn get_messages(
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    JsonBody(body): JsonBody<GetBody>,
) -> Result<Json<Value>, ApiError> {
    let mode = ack_mode(&body.ackmode)?;
    if body.count == 0 || body.count > MAX_GET_COUNT {
        return Err(bad_request(format!("count must be from 1 to {MAX_GET_COUNT}")));
    }
    let host = api.vhost(&vhost)?;
    let queue = host.queue(&name)?;
    queue.check_owner(super::queues::API_CONNECTION)?;
    let session = ApiChannel::open(&host);
    let truncate = truncation(body.truncate);
    let mut taken = Vec::new();
    let mut answer = Vec::new();
    let mut answer_bytes = 0;
    // Messages are taken until the count, or until the answer holds MAX_ANSWER_BYTES: the
    // rest stay in the queue.
    for _ in 0..body.count {
        if answer_bytes >= MAX_ANSWER_BYTES {
            break;
        }
        let got = match queue.get(&session, false).wait().await {
            Ok(Some(got)) => got,
            Ok(None) => break,
            Err(error) => return Err(error.into()),
        };
        let mut item = message_json::message_json(&got.message, &body.encoding, truncate);
        item["redelivered"] = json!(got.redelivered);
        item["message_count"] = json!(got.message_count);
        answer_bytes += item.to_string().len();
        answer.push(item);
        taken.push(got.delivery_tag);
    }
    for tag in taken {
        let settled = match mode {
            AckMode::Ack => session.ack(tag, false),
            AckMode::Reject => session.reject(tag, false, false),
            AckMode::Requeue => session.reject(tag, false, true),
        };
        settled?;
    }
    Ok(Json(Value::Array(answer)))
}

/// What a replay asks for (by the query string, or in a request on the live feed).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ReplayQuery {
    /// An offset, `first`, `last` or `next` (default `first`).
    offset: Option<String>,
    /// Start at the first message appended at or after this time (ms since the epoch).
    timestamp: Option<i64>,
    count: Option<usize>,
    max_bytes: Option<usize>,
    /// Only messages with this tag (`x-stream-filter-value`); several separated by commas.
    filter: Option<String>,
    encoding: Option<String>,
    truncate: Option<usize>,
}

fn start_of(query: &ReplayQuery) -> Result<OffsetSpec, ApiError> {
    if let Some(ms) = query.timestamp {
        return Ok(OffsetSpec::Timestamp(ms));
    }
    match query.offset.as_deref().unwrap_or("first") {
        "first" => Ok(OffsetSpec::First),
        "last" => Ok(OffsetSpec::Last),
        "next" => Ok(OffsetSpec::Next),
        number => number
            .parse()
            .map(OffsetSpec::Offset)
            .map_err(|_| bad_request(format!("offset must be a number, first, last or next, not {number:?}"))),
    }
}

/// Reads a queue's log from an offset without consuming it: the messages with their offsets
/// and times, and where to read next.
async fn replay(
    State(api): State<Management>,
    Path((vhost, name)): Path<(String, String)>,
    Query(query): Query<ReplayQuery>,
) -> Result<Json<Value>, ApiError> {
    read_log(&api, &vhost, &name, query).await.map(Json)
}

/// Reads the log of queue `name` of `vhost` (a stream, or a durable classic queue) as
/// `query` says, on the blocking pool and in turn with other reads. Whether the caller may
/// read it is for the caller of this function to have checked.
pub(crate) async fn read_log(api: &Management, vhost: &str, name: &str, query: ReplayQuery) -> Result<Value, ApiError> {
    let queue = api.vhost(vhost)?.queue(name)?;
    queue.check_owner(super::queues::API_CONNECTION)?;
    let log = queue.browser().ok_or_else(|| {
        bad_request(format!(
            "queue '{name}' keeps no log on this node: streams and durable classic queues (their persistent messages) are read by offset"
        ))
    })?;
    let _turn =
        api.log_reads().acquire().await.map_err(|_| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "stopping"))?;
    let (vhost, name) = (vhost.to_string(), name.to_string());
    let read = tokio::task::spawn_blocking(move || read_within_budget(&log, &vhost, &name, &query));
    read.await.map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
}

/// One replay read, its answer within [`MAX_ANSWER_BYTES`] of JSON.
fn read_within_budget(
    log: &warren_delivery::message_store::log_browser::LogBrowser,
    vhost: &str,
    name: &str,
    query: &ReplayQuery,
) -> Result<Value, ApiError> {
    let count = query.count.unwrap_or(100).clamp(1, MAX_REPLAY_COUNT);
    let max_bytes = query.max_bytes.unwrap_or(MAX_REPLAY_BYTES).clamp(1, MAX_REPLAY_BYTES);
    let filter = query
        .filter
        .as_deref()
        .filter(|f| !f.is_empty())
        .map(|f| TagFilter::new(f.split(',').map(|tag| tag.as_bytes().to_vec()).collect(), false));
    let internal =
        |e: warren_delivery::message_store::StoreError| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    let from = log.offset_of(start_of(query)?).map_err(internal)?;
    let batch = log.read(from, count, max_bytes, filter.as_ref()).map_err(internal)?;
    let (encoding, truncate) = (query.encoding.as_deref().unwrap_or("auto"), truncation(query.truncate));
    let mut messages = Vec::new();
    let (mut answer_bytes, mut next_offset) = (0, batch.next_offset);
    for read in &batch.messages {
        let mut item = message_json::message_json(&read.message, encoding, truncate);
        item["offset"] = json!(read.offset);
        item["timestamp"] = json!(read.timestamp_ms);
        let item_bytes = item.to_string().len();
        if !messages.is_empty() && answer_bytes + item_bytes > MAX_ANSWER_BYTES {
            next_offset = read.offset;
            break;
        }
        answer_bytes += item_bytes;
        messages.push(item);
    }
    Ok(json!({
        "queue": name,
        "vhost": vhost,
        "messages": messages,
        "next_offset": next_offset,
        "first_offset": batch.first_offset,
        "end_offset": batch.end_offset,
    }))
}

/// RabbitMQ's aliveness test: declares `queue` (durable, in `vhost`), publishes a message to
/// it and takes it back.
pub(crate) async fn round_trip(vhost: &Arc<VirtualHost>, queue: &str) -> Result<(), String> {
    let definition = QueueDefinition {
        name: queue.to_string(),
        durable: false,
        exclusive_owner: None,
        auto_delete: false,
        arguments: Default::default(),
    };
    let declared = vhost.declare_queue(definition, warren_delivery::ConnectionId(0)).map_err(|e| e.to_string())?;
    let body = bytes::Bytes::from_static(b"test_message");
    let message = Message {
        exchange: ShortString::default(),
        routing_key: ShortString::try_new(queue.to_string()).map_err(|_| "queue name too long".to_string())?,
        properties: warren_delivery::Properties::empty(),
        body: body.clone(),
    };
    declared.queue.publish(Arc::new(message)).map_err(|e| e.to_string())?;
    let session = ApiChannel::open(vhost);
    let got = declared.queue.get(&session, true).wait().await.map_err(|e| e.to_string());
    match got? {
        Some(got) if got.message.body == body => Ok(()),
        _ => Err("the test message did not come back".to_string()),
    }
}
