//! The live feed the UI renders: `GET /ws` (a WebSocket, authenticated by the session cookie
//! or Basic auth) pushes the broker's figures every second, so the UI never polls, and
//! answers the UI's requests on the same socket.
//!
//! Sent: `{"type": "hello", "user", "node", "history"}` first (five minutes of the totals, for
//! the charts, to monitors), then `{"type": "tick", "at_ms", "overview", "queues"?, "queue"?}`
//! every second; `queues` (one page of the queue table, filtered and sorted by the broker, in
//! the shape `GET /api/queues?page=` answers) and `queue` (one queue in full; absent once it is
//! gone, `subscribed_queue` naming it) only while subscribed.
//! Received: `{"type": "subscribe", "queues": {"vhost", "name", "use_regex", "sort",
//! "sort_reverse", "page", "page_size"} | null, "queue": {"vhost", "name"} | null}` (`vhost`
//! of `queues`, if given, keeps the table to that vhost's queues), and `{"type": "browse",
//! "id", "vhost", "queue", "offset" | "timestamp", "count", "filter", "since"}`, answered with
//! `{"type": "messages", "id", ...}` (a log read by offset, as
//! `GET /api/queues/{vhost}/{name}/messages` answers). The feed's own offset `tail` reads the
//! newest `count` messages, or from `since` (where the reader got to) if fewer came since; the
//! answer's `skipped` counts the messages after `since` it jumped over (see [`TailPlan`]).
//!
//! Every subscription is checked as the API's routes are (see `authorization`): the overview
//! and the queue table hold only what the user may see, a queue's details need its vhost to
//! be visible, a browse needs read permission on the queue. The socket closes within a tick of
//! the user's access changing (password, tags, permissions, deletion), and at once for a
//! client that does not read what it is sent: a send that does not complete within
//! [`SEND_TIMEOUT`] drops it, and at most [`MAX_QUEUED_BYTES`] wait for it. The figures of a
//! tick are read once for every subscriber (see `figures`). A page of another origin
//! may not open the socket (the browser would send the user's cookie along).

use crate::api::{queue_json, read_log, Management, QueueRow, ReplayQuery};
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
use serde_json::{json, Map, Value};
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
/// The browse offset that reads the newest page.
const TAIL: &str = "tail";
/// Messages a tail read returns when it does not say (as a replay's default), and at most
/// (a replay's most).
const TAIL_DEFAULT_COUNT: u64 = 100;
const TAIL_MAX_COUNT: u64 = 1_000;

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
    queues: Option<QueueTable>,
    queue: Option<(String, String)>,
}

/// The queue table a subscriber wants: a page of the queues of `vhost`, or of every vhost the
/// caller sees.
#[derive(Debug, Clone, Deserialize)]
struct QueueTable {
    #[serde(default)]
    vhost: Option<String>,
    #[serde(flatten)]
    list: ListQuery,
}

/// A request from the UI.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Request {
    Subscribe {
        #[serde(default)]
        queues: Option<QueueTable>,
        #[serde(default)]
        queue: Option<QueueName>,
    },
    Browse {
        #[serde(default)]
        id: Value,
        vhost: String,
        queue: String,
        /// The replay's fields (see `ReplayQuery`), `offset` possibly [`TAIL`], and `since`.
        #[serde(flatten)]
        query: Map<String, Value>,
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
                // An empty vhost is no filter (the UI's "All").
                let queues = queues
                    .map(|table| QueueTable { vhost: table.vhost.filter(|v| !v.is_empty()), list: table.list.paged() });
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
    async fn browse(&self, vhost: &str, queue: &str, mut fields: Map<String, Value>) -> Result<Value, ApiError> {
        let params = HashMap::from([("vhost".to_string(), vhost.to_string()), ("name".to_string(), queue.to_string())]);
        authorization::object(&self.api, &self.caller, ObjectOp::ReadQueue, &params, &Value::Null)?;
        let tail = tail_plan(&self.api, vhost, queue, &mut fields)?;
        let query: ReplayQuery =
            serde_json::from_value(Value::Object(fields)).map_err(|e| bad_request(format!("not a browse: {e}")))?;
        let mut read = read_log(&self.api, vhost, queue, query).await?;
        if let Some(tail) = tail {
            read["skipped"] = json!(tail.skipped);
        }
        Ok(read)
    }

    /// The figures of one tick, as the subscription wants them and the caller may see them.
    async fn tick(&mut self) -> Value {
        self.last_answer = Some(Instant::now());
        let (api, caller) = (&self.api, &self.caller);
        // The snapshot's queues serve the table of every vhost; one vhost's is read apart.
        let whole_table = self.subscription.queues.as_ref().is_some_and(|table| table.vhost.is_none());
        let snapshot = api.figures().current(api, whole_table).await;
        let overview = snapshot.feed_overview(api, caller);
        let mut tick = json!({ "type": "tick", "at_ms": snapshot.at_ms, "overview": overview });
        if let Some(table) = &self.subscription.queues {
            tick["queues"] = match &table.vhost {
                None => snapshot.queue_table(api, caller, &table.list),
                Some(vhost) => vhost_queue_table(api, caller, vhost, &table.list).await,
            };
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

/// The page of the queue table of `vhost` that `list` asks for, read now on the blocking pool
/// (walking a vhost's queues may take a while); `{"error"}` for a vhost the caller does not see.
async fn vhost_queue_table(api: &Management, caller: &Caller, vhost: &str, list: &ListQuery) -> Value {
    let (api, caller, vhost, list) = (api.clone(), caller.clone(), vhost.to_string(), list.clone());
    let page = tokio::task::spawn_blocking(move || {
        authorization::visible_vhost(&api, &caller, &vhost)?;
        list.apply_to_live_table(QueueRow::all(&api, &caller, Some(&vhost))?)
    });
    match page.await {
        Ok(Ok(page)) => page,
        Ok(Err(error)) => json!({ "error": error.reason() }),
        Err(error) => json!({ "error": error.to_string() }),
    }
}

fn bad_request(reason: impl Into<String>) -> ApiError {
    ApiError::new(axum::http::StatusCode::BAD_REQUEST, reason)
}

/// Where a tail read starts, and what it leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TailPlan {
    /// The offset read from.
    from: u64,
    /// Messages after the reader's `since` that the read jumps over.
    skipped: u64,
}

impl TailPlan {
    /// In a log holding `first..end`: the newest `count` messages, or from `since` if it lies
    /// within them (the reader is keeping up: nothing is shown twice or left out). A `since`
    /// past the end (the log was made anew) starts at the newest page too.
    fn new((first, end): (u64, u64), count: u64, since: Option<u64>) -> Self {
        let newest_page = end.saturating_sub(count).max(first);
        let from = match since {
            Some(since) if (newest_page..=end).contains(&since) => since,
            _ => newest_page,
        };
        TailPlan { from, skipped: since.map_or(0, |since| from.saturating_sub(since)) }
    }
}

/// If `fields` ask for the [`TAIL`] offset, turns it into the offset it stands for now, with
/// the count made explicit; `since` is taken out either way. A queue without a log is left to
/// the read to refuse, with its reasons.
fn tail_plan(
    api: &Management,
    vhost: &str,
    queue: &str,
    fields: &mut Map<String, Value>,
) -> Result<Option<TailPlan>, ApiError> {
    let since = match fields.remove("since") {
        None | Some(Value::Null) => None,
        Some(value) => {
            Some(value.as_u64().ok_or_else(|| bad_request(format!("since must be an offset, not {value}")))?)
        }
    };
    if fields.get("offset").and_then(Value::as_str) != Some(TAIL) {
        return Ok(None);
    }
    let bounds = api.vhost(vhost).ok().and_then(|v| v.queue(queue).ok()).and_then(|q| q.browser()).map(|l| l.bounds());
    let Some(bounds) = bounds else { return Ok(None) };
    let count = match fields.get("count") {
        None | Some(Value::Null) => TAIL_DEFAULT_COUNT,
        Some(value) => crate::lenient::count(value.clone()).map_err(|e| bad_request(format!("count: {e}")))? as u64,
    };
    let count = count.clamp(1, TAIL_MAX_COUNT);
    let plan = TailPlan::new(bounds, count, since);
    fields.insert("offset".into(), json!(plan.from.to_string()));
    fields.insert("count".into(), json!(count));
    Ok(Some(plan))
}

/// Sends `value`, or fails if the client does not take it within [`SEND_TIMEOUT`].
async fn send(socket: &mut WebSocket, value: Value) -> Result<(), ()> {
    match tokio::time::timeout(SEND_TIMEOUT, socket.send(Message::Text(value.to_string().into()))).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ClusterView, NodeStatus};
    use amq_protocol::types::{AMQPValue, FieldTable, LongString, ShortString};
    use std::path::PathBuf;
    use std::sync::Arc;
    use warren_delivery::access::AccessChange;
    use warren_delivery::message_store::LogStoreConfig;
    use warren_delivery::{Broker, ConnectionId, Message, Properties, QueueDefinition};

    struct Alone;

    impl ClusterView for Alone {
        fn nodes(&self) -> Vec<NodeStatus> {
            vec![NodeStatus { name: "test@localhost".into(), running: true, kind: "disc" }]
        }
        fn node_id(&self, _name: &str) -> Option<u64> {
            Some(1)
        }
        fn local_node(&self) -> String {
            "test@localhost".into()
        }
        fn cluster_name(&self) -> String {
            "test".into()
        }
    }

    /// A data directory of its own, removed at the end of the test.
    struct DataDir(PathBuf);

    impl DataDir {
        fn new(test: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("warren-feed-{test}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            DataDir(dir)
        }
    }

    impl Drop for DataDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn declare(broker: &Broker, vhost: &str, name: &str, kind: &str, durable: bool) {
        let mut arguments = FieldTable::default();
        arguments.insert(ShortString::from("x-queue-type"), AMQPValue::LongString(LongString::from(kind)));
        let definition =
            QueueDefinition { name: name.into(), durable, exclusive_owner: None, auto_delete: false, arguments };
        broker.vhost(vhost).expect("vhost").declare_queue(definition, ConnectionId(0)).expect("declared");
    }

    /// A broker with vhosts `/` and `other`, a queue `dead` in each, and stream `log` in `/`
    /// holding messages 0 to 99; the feed of its `guest`.
    async fn feed(dir: &DataDir) -> Feed {
        let broker = Broker::open(&dir.0, LogStoreConfig::default()).expect("broker opens");
        let change = AccessChange::PutVhost { name: "other".into(), description: String::new() };
        broker.change_access(change).await.expect("vhost added");
        declare(&broker, "/", "dead", "classic", false);
        declare(&broker, "other", "dead", "classic", false);
        declare(&broker, "/", "log", "stream", true);
        let vhost = broker.vhost("/").expect("default vhost");
        for n in 0..100 {
            let body = bytes::Bytes::from(format!("m{n}"));
            let message =
                Message { exchange: "".into(), routing_key: "log".into(), properties: Properties::empty(), body };
            vhost.publish("", Arc::new(message)).expect("routed");
        }
        let api = Management::new(broker, Arc::new(Alone), Vec::new());
        let (user, revision) = api.broker().access().user_with_revision("guest").expect("guest");
        Feed::new(api.clone(), Caller::of(&user, revision, None))
    }

    /// The answer to `request` (a subscription's comes with the next tick if not at once).
    async fn ask(feed: &mut Feed, request: Value) -> Value {
        match feed.handle(&request.to_string()).await {
            Some(answer) => answer,
            None => feed.tick().await,
        }
    }

    fn offsets(answer: &Value) -> Vec<u64> {
        let messages = answer["messages"].as_array().unwrap_or_else(|| panic!("messages: {answer}"));
        messages.iter().filter_map(|m| m["offset"].as_u64()).collect()
    }

    #[test]
    fn a_tail_read_jumps_to_the_newest_page_only_when_the_reader_fell_behind() {
        let log = (10, 110);
        assert_eq!(TailPlan::new(log, 25, None), TailPlan { from: 85, skipped: 0 }, "the newest page");
        assert_eq!(TailPlan::new(log, 25, Some(40)), TailPlan { from: 85, skipped: 45 }, "behind: jumps");
        assert_eq!(TailPlan::new(log, 25, Some(100)), TailPlan { from: 100, skipped: 0 }, "keeping up");
        assert_eq!(TailPlan::new(log, 25, Some(110)), TailPlan { from: 110, skipped: 0 }, "at the end");
        assert_eq!(TailPlan::new(log, 25, Some(500)), TailPlan { from: 85, skipped: 0 }, "a log made anew");
        assert_eq!(TailPlan::new(log, 500, Some(0)), TailPlan { from: 10, skipped: 10 }, "all of a short log");
        assert_eq!(TailPlan::new((0, 0), 25, Some(0)), TailPlan { from: 0, skipped: 0 }, "an empty log");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_queue_table_keeps_to_the_vhost_asked_for() {
        let dir = DataDir::new("vhost-table");
        let mut feed = feed(&dir).await;
        let every = ask(&mut feed, json!({"type": "subscribe", "queues": {"name": "dead"}})).await;
        let vhosts = |tick: &Value| -> Vec<String> {
            let items = tick["queues"]["items"].as_array().unwrap_or_else(|| panic!("a table: {tick}"));
            items
                .iter()
                .map(|q| format!("{} {}", q["vhost"].as_str().unwrap_or("?"), q["name"].as_str().unwrap_or("?")))
                .collect()
        };
        assert_eq!(vhosts(&every), ["/ dead", "other dead"]);
        let other = ask(&mut feed, json!({"type": "subscribe", "queues": {"vhost": "other", "sort": "name"}})).await;
        assert_eq!(vhosts(&other), ["other dead"]);
        assert_eq!(other["queues"]["total_count"], 1, "only that vhost's queues are counted");
        let all = ask(&mut feed, json!({"type": "subscribe", "queues": {"vhost": "", "page_size": 1}})).await;
        assert_eq!((all["queues"]["total_count"].as_u64(), all["queues"]["page_count"].as_u64()), (Some(3), Some(3)));
        let nowhere = ask(&mut feed, json!({"type": "subscribe", "queues": {"vhost": "nowhere"}})).await;
        let error = nowhere["queues"]["error"].as_str().unwrap_or_default();
        assert!(error.contains("nowhere"), "{nowhere}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_vhost_the_user_may_not_see_has_no_table() {
        use warren_delivery::access::{PasswordChange, PermissionSpec};
        let dir = DataDir::new("hidden-vhost");
        let guest = feed(&dir).await;
        let broker = guest.api.broker();
        let tags = Some(vec!["management".to_string()]);
        let user = AccessChange::PutUser { name: "bob".into(), password: PasswordChange::new_password("pw"), tags };
        broker.change_access(user).await.expect("user added");
        let grant = AccessChange::SetPermissions {
            vhost: "/".into(),
            user: "bob".into(),
            permissions: PermissionSpec::everything(),
        };
        broker.change_access(grant).await.expect("permissions set");
        let (bob, revision) = broker.access().user_with_revision("bob").expect("bob");
        let mut feed = Feed::new(guest.api.clone(), Caller::of(&bob, revision, None));
        let hidden = ask(&mut feed, json!({"type": "subscribe", "queues": {"vhost": "other"}})).await;
        assert!(hidden["queues"]["items"].is_null(), "{hidden}");
        assert!(hidden["queues"]["error"].as_str().is_some_and(|e| e.contains("other")), "{hidden}");
        let own = ask(&mut feed, json!({"type": "subscribe", "queues": {"vhost": "/"}})).await;
        assert_eq!(own["queues"]["total_count"], 2, "dead and log: {own}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tail_browse_reads_the_newest_page_and_counts_what_it_skipped() {
        let dir = DataDir::new("tail");
        let mut feed = feed(&dir).await;
        let browse = |more: Value| {
            let mut request =
                json!({"type": "browse", "id": 3, "vhost": "/", "queue": "log", "offset": "tail", "count": 10});
            request.as_object_mut().expect("object").extend(more.as_object().expect("object").clone());
            request
        };
        let newest = ask(&mut feed, browse(json!({}))).await;
        assert_eq!(offsets(&newest), (90..100).collect::<Vec<_>>());
        assert_eq!((newest["id"].as_u64(), newest["skipped"].as_u64()), (Some(3), Some(0)));
        let behind = ask(&mut feed, browse(json!({"since": 20}))).await;
        assert_eq!(offsets(&behind), (90..100).collect::<Vec<_>>());
        assert_eq!(behind["skipped"], 70, "{behind}");
        let keeping_up = ask(&mut feed, browse(json!({"since": 95}))).await;
        assert_eq!(offsets(&keeping_up), [95, 96, 97, 98, 99]);
        assert_eq!((keeping_up["skipped"].as_u64(), keeping_up["next_offset"].as_u64()), (Some(0), Some(100)));
        let by_text = ask(&mut feed, browse(json!({"count": "4"}))).await;
        assert_eq!(offsets(&by_text), [96, 97, 98, 99]);

        let bad_since = ask(&mut feed, browse(json!({"since": "soon"}))).await;
        assert!(bad_since["error"].as_str().is_some_and(|e| e.contains("since must be an offset")), "{bad_since}");
        let bad_count = ask(&mut feed, browse(json!({"count": "many"}))).await;
        assert!(bad_count["error"].as_str().is_some_and(|e| e.contains("count")), "{bad_count}");
        let no_log =
            ask(&mut feed, json!({"type": "browse", "id": 4, "vhost": "/", "queue": "dead", "offset": "tail"})).await;
        assert!(no_log["error"].as_str().is_some_and(|e| e.contains("keeps no log")), "{no_log}");
        // Offsets the replay knows still read as before.
        let from_two =
            ask(&mut feed, json!({"type": "browse", "id": 5, "vhost": "/", "queue": "log", "offset": "2", "count": 2}))
                .await;
        assert_eq!((offsets(&from_two), from_two.get("skipped")), (vec![2, 3], None));
    }
}
