//! The live feed the UI renders: `GET /ws` (a WebSocket, authenticated by the session cookie
//! or Basic auth) pushes the broker's figures every second, so the UI never polls, and
//! answers the UI's requests on the same socket.
//!
//! Sent: `{"type": "hello", "user", "node", "history"}` first (five minutes of the totals, for
//! the charts), then `{"type": "tick", "at_ms", "overview", "queues"?, "queue"?}` every second;
//! `queues` (one page of the queue table, filtered and sorted by the broker, in the shape
//! `GET /api/queues?page=` answers) and `queue` (one queue in full; absent once it is gone,
//! `subscribed_queue` naming it) only while subscribed.
//! Received: `{"type": "subscribe", "queues": {"name", "use_regex", "sort", "sort_reverse",
//! "page", "page_size"} | null, "queue": {"vhost", "name"} | null}`, and `{"type": "browse",
//! "id", "vhost", "queue", "offset" | "timestamp", "count", "filter"}`, answered with
//! `{"type": "messages", "id", ...}` (a log read by offset, as
//! `GET /api/queues/{vhost}/{name}/messages` answers).

use crate::api::{message_stats, queue_json, read_log, Management, QueueRow, ReplayQuery};
use crate::auth::Authenticated;
use crate::listing::ListQuery;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

/// How often figures are pushed.
pub const PUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Largest request the UI may send.
const MAX_REQUEST_BYTES: usize = 16 * 1024;

/// The feed's route.
pub fn routes() -> Router<Management> {
    Router::new().route("/ws", get(upgrade))
}

async fn upgrade(who: Authenticated, State(api): State<Management>, ws: WebSocketUpgrade) -> Response {
    ws.max_message_size(MAX_REQUEST_BYTES)
        .max_frame_size(MAX_REQUEST_BYTES)
        .on_upgrade(move |socket| feed(socket, api, who))
}

/// What the UI asked to be told.
#[derive(Debug, Default)]
struct Subscription {
    queues: Option<ListQuery>,
    queue: Option<(String, String)>,
}

/// A request from the UI.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Request {
    Subscribe {
        #[serde(default)]
        queues: Option<ListQuery>,
        #[serde(default)]
        queue: Option<QueueName>,
    },
    Browse {
        #[serde(default)]
        id: Value,
        vhost: String,
        queue: String,
        #[serde(flatten)]
        query: ReplayQuery,
    },
}

#[derive(Debug, Deserialize)]
struct QueueName {
    vhost: String,
    name: String,
}

async fn send(socket: &mut WebSocket, value: Value) -> bool {
    socket.send(Message::Text(value.to_string().into())).await.is_ok()
}

async fn feed(mut socket: WebSocket, api: Management, who: Authenticated) {
    let hello = json!({ "type": "hello", "user": who.user, "node": api.node(), "history": api.rates().history() });
    if !send(&mut socket, hello).await {
        return;
    }
    let mut subscription = Subscription::default();
    let mut tick = tokio::time::interval(PUSH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut shutdown = api.shutdown();
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if !send(&mut socket, tick_of(&api, &who, &subscription)).await {
                    return;
                }
            }
            received = socket.recv() => match received {
                Some(Ok(Message::Text(text))) => {
                    if let Some(answer) = handle(&api, &who, &mut subscription, text.as_str()) {
                        if !send(&mut socket, answer).await {
                            return;
                        }
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            },
            // Upgraded sockets outlive the server's graceful shutdown: each closes itself.
            _ = shutdown.changed() => {
                let _ = socket.send(Message::Close(None)).await;
                return;
            }
        }
    }
}

/// Handles one request; what to answer, if anything.
fn handle(api: &Management, who: &Authenticated, subscription: &mut Subscription, text: &str) -> Option<Value> {
    let request: Request = match serde_json::from_str(text) {
        Ok(request) => request,
        Err(error) => return Some(json!({ "type": "error", "reason": format!("not a request: {error}") })),
    };
    match request {
        Request::Subscribe { queues, queue } => {
            // A live table is always paged: the broker never sends every queue each second.
            let queues = queues.map(ListQuery::paged);
            *subscription = Subscription { queues, queue: queue.map(|q| (q.vhost, q.name)) };
            Some(tick_of(api, who, subscription))
        }
        Request::Browse { id, vhost, queue, query } => Some(match read_log(api, who, &vhost, &queue, &query) {
            Ok(mut read) => {
                read["type"] = json!("messages");
                read["id"] = id;
                read
            }
            Err(error) => json!({ "type": "messages", "id": id, "error": error.reason() }),
        }),
    }
}

/// The figures of one tick, as `subscription` wants them.
fn tick_of(api: &Management, who: &Authenticated, subscription: &Subscription) -> Value {
    let broker = api.broker();
    let connections = broker.connections().all();
    let channels: usize = connections.iter().map(|c| c.channels().len()).sum();
    let latest = api.rates().latest().unwrap_or_default();
    let mut tick = json!({
        "type": "tick",
        "at_ms": latest.at_ms,
        "overview": {
            "message_stats": message_stats(&api.rates().totals()),
            "point": latest,
            "connections": connections.len(),
            "channels": channels,
            "queues": broker.vhosts().iter().map(|v| v.queues().len()).sum::<usize>(),
            "nodes": api.cluster_nodes(),
        },
    });
    if let Some(table) = &subscription.queues {
        tick["queues"] = QueueRow::all(api, who, None)
            .and_then(|rows| table.apply_to_live_table(rows))
            .unwrap_or_else(|error| json!({ "error": error.reason() }));
    }
    if let Some((vhost, name)) = &subscription.queue {
        tick["subscribed_queue"] = json!(name);
        if let Some(queue) = api.vhost(who, vhost).ok().and_then(|v| v.queue(name).ok()) {
            tick["queue"] = queue_json(api, vhost, &queue);
        }
    }
    tick
}
