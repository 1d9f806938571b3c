//! The live feed the UI renders: `GET /ws` (a WebSocket, authenticated by the session cookie
//! or Basic auth) pushes the broker's figures every second, so the UI never polls, and
//! answers the UI's requests on the same socket.
//!
//! Sent: `{"type": "hello", "user", "node", "history"}` first (five minutes of the totals, for
//! the charts, to monitors), then `{"type": "tick", "at_ms", "overview", "queues"?, "queue"?}`
//! every second; `queues` (one page of the queue table, filtered and sorted by the broker, in
//! the shape `GET /api/queues?page=` answers) and `queue` (one queue in full; absent once it is
//! gone, `subscribed_queue` naming it) only while subscribed.
//! Received: `{"type": "subscribe", "queues": {"name", "use_regex", "sort", "sort_reverse",
//! "page", "page_size"} | null, "queue": {"vhost", "name"} | null}`, and `{"type": "browse",
//! "id", "vhost", "queue", "offset" | "timestamp", "count", "filter"}`, answered with
//! `{"type": "messages", "id", ...}` (a log read by offset, as
//! `GET /api/queues/{vhost}/{name}/messages` answers).
//!
//! Every subscription is checked as the API's routes are (see `authorization`): the overview
//! and the queue table hold only what the user may see, a queue's details need its vhost to
//! be visible, a browse needs read permission on the queue. The socket closes within a tick of
//! the user's access changing (password, tags, permissions, deletion), and at once for a
//! client that does not read what it is sent: a send that does not complete within
//! [`SEND_TIMEOUT`] drops it, and at most [`MAX_QUEUED_BYTES`] wait for it. The figures of a
//! tick are read once for every subscriber (see `figures`). A page of another origin
//! may not open the socket (the browser would send the user's cookie along).

use crate::api::{queue_json, read_log, Management, ReplayQuery};
use crate::authorization::{self, Caller, ObjectOp};
use crate::error::ApiError;
use crate::http_listener::ConnectionSlot;
use crate::listing::ListQuery;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often figures are pushed.
pub const PUSH_INTERVAL: Duration = Duration::from_secs(1);
/// Largest request the UI may send.
const MAX_REQUEST_BYTES: usize = 16 * 1024;
/// Time one message may take to be taken by the client before the client is dropped.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes that may wait to be written to one client.
pub const MAX_QUEUED_BYTES: usize = 4 << 20;
/// Least time between two answers to subscriptions (more come with the next tick).
const MIN_ANSWER_INTERVAL: Duration = Duration::from_millis(200);
/// The close code of a socket whose user's access changed (a private-use code).
const ACCESS_CHANGED_CLOSE_CODE: u16 = 4001;

/// `GET /ws`: the upgrade, refused to pages of another origin (403).
pub async fn upgrade(
    caller: Caller,
    State(api): State<Management>,
    slot: Option<Extension<ConnectionSlot>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    if let Err(refused) = crate::same_origin::check(&headers, "the live feed") {
        return refused.into_response();
    }
    let slot = slot.map(|Extension(slot)| slot);
    ws.max_message_size(MAX_REQUEST_BYTES)
        .max_frame_size(MAX_REQUEST_BYTES)
        .max_write_buffer_size(MAX_QUEUED_BYTES)
        .on_upgrade(move |socket| async move {
            // The connection's slot lives as long as the socket.
            let _slot = slot;
            Feed::new(api, caller).run(socket).await;
        })
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

/// Why a feed ended.
enum Ended {
    /// The client went, or stopped reading.
    Gone,
    /// The user's access changed.
    AccessChanged,
}

/// One client's feed.
struct Feed {
    api: Management,
    caller: Caller,
    subscription: Subscription,
    last_answer: Option<Instant>,
}

impl Feed {
    fn new(api: Management, caller: Caller) -> Self {
        Feed { api, caller, subscription: Subscription::default(), last_answer: None }
    }

    async fn run(mut self, mut socket: WebSocket) {
        let history = if self.caller.is_monitor() { json!(self.api.rates().history()) } else { json!([]) };
        let hello = json!({ "type": "hello", "user": self.caller.user, "node": self.api.node(), "history": history });
        if send(&mut socket, hello).await.is_err() {
            return;
        }
        match self.serve(&mut socket).await {
            Ended::Gone => {}
            Ended::AccessChanged => {
                let frame = CloseFrame { code: ACCESS_CHANGED_CLOSE_CODE, reason: "the user's access changed".into() };
                let _ = tokio::time::timeout(SEND_TIMEOUT, socket.send(Message::Close(Some(frame)))).await;
            }
        }
    }

    async fn serve(&mut self, socket: &mut WebSocket) -> Ended {
        let mut tick = tokio::time::interval(PUSH_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut shutdown = self.api.shutdown();
        loop {
            let answer = tokio::select! {
                _ = tick.tick() => {
                    if !self.caller.is_current(&self.api) {
                        return Ended::AccessChanged;
                    }
                    Some(self.tick().await)
                }
                received = socket.recv() => match received {
                    Some(Ok(Message::Text(text))) => self.handle(text.as_str()).await,
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return Ended::Gone,
                    Some(Ok(_)) => None,
                },
                // Upgraded sockets outlive the server's graceful shutdown: each closes itself.
                _ = shutdown.changed() => {
                    let _ = tokio::time::timeout(SEND_TIMEOUT, socket.send(Message::Close(None))).await;
                    return Ended::Gone;
                }
            };
            if let Some(answer) = answer {
                if send(socket, answer).await.is_err() {
                    return Ended::Gone;
                }
            }
        }
    }

    /// Handles one request; what to answer, if anything now.
    async fn handle(&mut self, text: &str) -> Option<Value> {
        let request: Request = match serde_json::from_str(text) {
            Ok(request) => request,
            Err(error) => return Some(json!({ "type": "error", "reason": format!("not a request: {error}") })),
        };
        match request {
            Request::Subscribe { queues, queue } => {
                // A live table is always paged: the broker never sends every queue each second.
                let queues = queues.map(ListQuery::paged);
                self.subscription = Subscription { queues, queue: queue.map(|q| (q.vhost, q.name)) };
                // Subscriptions sent back to back are answered by the next tick (which checks
                // the caller's access first).
                let recent = self.last_answer.is_some_and(|at| at.elapsed() < MIN_ANSWER_INTERVAL);
                if recent || !self.caller.is_current(&self.api) {
                    return None;
                }
                Some(self.tick().await)
            }
            Request::Browse { id, vhost, queue, query } => {
                let mut read = match self.browse(&vhost, &queue, query).await {
                    Ok(read) => read,
                    Err(error) => json!({ "error": error.reason() }),
                };
                read["type"] = json!("messages");
                read["id"] = id;
                Some(read)
            }
        }
    }

    /// A browse: read permission on the queue, as `GET .../messages` needs.
    async fn browse(&self, vhost: &str, queue: &str, query: ReplayQuery) -> Result<Value, ApiError> {
        let params = HashMap::from([("vhost".to_string(), vhost.to_string()), ("name".to_string(), queue.to_string())]);
        authorization::object(&self.api, &self.caller, ObjectOp::ReadQueue, &params, &Value::Null)?;
        read_log(&self.api, vhost, queue, query).await
    }

    /// The figures of one tick, as the subscription wants them and the caller may see them.
    async fn tick(&mut self) -> Value {
        self.last_answer = Some(Instant::now());
        let (api, caller) = (&self.api, &self.caller);
        let snapshot = api.figures().current(api, self.subscription.queues.is_some()).await;
        let overview = snapshot.feed_overview(api, caller);
        let mut tick = json!({ "type": "tick", "at_ms": snapshot.at_ms, "overview": overview });
        if let Some(table) = &self.subscription.queues {
            tick["queues"] = snapshot.queue_table(api, caller, table);
        }
        if let Some((vhost, name)) = &self.subscription.queue {
            tick["subscribed_queue"] = json!(name);
            let visible = authorization::visible_vhost(api, caller, vhost).is_ok();
            let queue = api.vhost(vhost).ok().and_then(|v| v.queue(name).ok()).filter(|_| visible);
            if let Some(queue) = queue {
                tick["queue"] = queue_json(api, vhost, &queue);
            }
        }
        tick
    }
}

/// Sends `value`, or fails if the client does not take it within [`SEND_TIMEOUT`].
async fn send(socket: &mut WebSocket, value: Value) -> Result<(), ()> {
    match tokio::time::timeout(SEND_TIMEOUT, socket.send(Message::Text(value.to_string().into()))).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(()),
    }
}
