//! The live feed's figures, read from the broker once per tick and shared by every subscriber:
//! however many browsers watch, the broker's queues are walked once a second (on the blocking
//! pool), and each subscriber only picks out of the snapshot what it may see (its vhosts, its
//! connections) and the page of the queue table it shows.

use crate::api::{message_stats, queue_json, Management, NodeStatus};
use crate::authorization::Caller;
use crate::listing::{field, ListQuery, Listed, SortKey};
use crate::rates::{HistoryPoint, QueueRates};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a snapshot serves before it is read again.
pub const SNAPSHOT_TTL: Duration = Duration::from_secs(1);

/// One vhost's figures.
#[derive(Debug, Default, Clone)]
struct VhostFigures {
    ready: u64,
    unacked: u64,
    queues: usize,
    rates: QueueRates,
}

/// One user's clients.
#[derive(Debug, Default, Clone, Copy)]
struct ClientFigures {
    connections: usize,
    channels: usize,
}

/// A queue of the live table: its vhost and its JSON (the shape `GET /api/queues` answers).
#[derive(Debug, Clone)]
struct QueueFigure {
    vhost: String,
    json: Value,
}

/// The broker's figures at one moment.
#[derive(Debug, Default)]
pub struct FeedSnapshot {
    /// When it was read (ms since the epoch).
    pub at_ms: u64,
    taken: Option<Instant>,
    by_vhost: HashMap<String, VhostFigures>,
    by_user: HashMap<String, ClientFigures>,
    nodes: Vec<NodeStatus>,
    /// Every queue, if a subscriber asked for the queue table.
    queues: Option<Vec<QueueFigure>>,
}

/// The latest snapshot, read again at most once per [`SNAPSHOT_TTL`].
#[derive(Debug, Default)]
pub struct FeedFigures {
    latest: tokio::sync::Mutex<Arc<FeedSnapshot>>,
}

impl FeedFigures {
    /// A snapshot at most [`SNAPSHOT_TTL`] old (with every queue if `with_queues`): the one
    /// there is, or a new one read by the first caller while the others wait for it.
    pub async fn current(&self, api: &Management, with_queues: bool) -> Arc<FeedSnapshot> {
        let mut latest = self.latest.lock().await;
        let fresh = latest.taken.is_some_and(|taken| taken.elapsed() < SNAPSHOT_TTL);
        if fresh && (!with_queues || latest.queues.is_some()) {
            return Arc::clone(&latest);
        }
        let api = api.clone();
        let read = tokio::task::spawn_blocking(move || FeedSnapshot::read(&api, with_queues)).await;
        if let Ok(snapshot) = read {
            *latest = Arc::new(snapshot);
        }
        Arc::clone(&latest)
    }
}

impl FeedSnapshot {
    fn read(api: &Management, with_queues: bool) -> Self {
        let broker = api.broker();
        let rates = api.rates().queues();
        let mut by_vhost: HashMap<String, VhostFigures> = HashMap::new();
        let mut queues = with_queues.then(Vec::new);
        for vhost in broker.vhosts() {
            let figures = by_vhost.entry(vhost.name().to_string()).or_default();
            for queue in vhost.queues() {
                figures.ready += u64::from(queue.message_count());
                figures.unacked += u64::from(queue.unacked_count());
                figures.queues += 1;
                let key = (vhost.name().to_string(), queue.name().to_string());
                if let Some(rate) = rates.get(&key) {
                    figures.rates = QueueRates {
                        counts: figures.rates.counts.plus(rate.counts),
                        rates: figures.rates.rates.plus(rate.rates),
                    };
                }
                if let Some(queues) = &mut queues {
                    queues.push(QueueFigure {
                        vhost: vhost.name().to_string(),
                        json: queue_json(api, vhost.name(), &queue),
                    });
                }
            }
        }
        let mut by_user: HashMap<String, ClientFigures> = HashMap::new();
        for info in broker.connections().all() {
            let figures = by_user.entry(info.handshake().user.unwrap_or_default()).or_default();
            figures.connections += 1;
            figures.channels += info.channels().len();
        }
        FeedSnapshot {
            at_ms: warren_delivery::scheduler::now_ms(),
            taken: Some(Instant::now()),
            by_vhost,
            by_user,
            nodes: api.cluster_nodes(),
            queues,
        }
    }

    /// The vhosts `caller` sees.
    fn visible_vhosts(&self, api: &Management, caller: &Caller) -> HashSet<String> {
        let broker = api.broker();
        self.by_vhost.keys().filter(|name| caller.may_see_vhost(broker, name)).cloned().collect()
    }

    /// The overview `caller` may see: its vhosts' figures, its connections (everything for a
    /// monitor, with the cluster's nodes).
    pub fn overview(&self, api: &Management, caller: &Caller) -> Value {
        let visible = self.visible_vhosts(api, caller);
        let shown = self.by_vhost.iter().filter(|(name, _)| visible.contains(*name)).map(|(_, figures)| figures);
        let vhosts = shown.fold(VhostFigures::default(), |total, v| VhostFigures {
            ready: total.ready + v.ready,
            unacked: total.unacked + v.unacked,
            queues: total.queues + v.queues,
            rates: QueueRates {
                counts: total.rates.counts.plus(v.rates.counts),
                rates: total.rates.rates.plus(v.rates.rates),
            },
        });
        let users = self.by_user.iter().filter(|(user, _)| caller.sees_connection_of(user)).map(|(_, c)| *c);
        let clients = users.fold(ClientFigures::default(), |total, c| ClientFigures {
            connections: total.connections + c.connections,
            channels: total.channels + c.channels,
        });
        let point = HistoryPoint {
            at_ms: self.at_ms,
            publish: vhosts.rates.rates.publish,
            deliver_get: vhosts.rates.rates.deliver_get,
            ack: vhosts.rates.rates.ack,
            ready: vhosts.ready,
            unacked: vhosts.unacked,
        };
        let nodes = if caller.is_monitor() { json!(self.nodes) } else { json!([]) };
        json!({
            "message_stats": message_stats(&vhosts.rates),
            "point": point,
            "connections": clients.connections,
            "channels": clients.channels,
            "queues": vhosts.queues,
            "nodes": nodes,
        })
    }

    /// The page of the queue table `table` asks for, of the queues `caller` sees.
    pub fn queue_table(&self, api: &Management, caller: &Caller, table: &ListQuery) -> Value {
        let visible = self.visible_vhosts(api, caller);
        let all = self.queues.as_deref().unwrap_or_default();
        let rows: Vec<Row<'_>> = all.iter().filter(|q| visible.contains(&q.vhost)).map(|q| Row(&q.json)).collect();
        table.apply_to_live_table(rows).unwrap_or_else(|error| json!({ "error": error.reason() }))
    }
}

/// A queue of the snapshot in a subscriber's table: copied only if it is on the page shown.
struct Row<'a>(&'a Value);

impl Listed for Row<'_> {
    fn name(&self) -> &str {
        self.0.get("name").and_then(Value::as_str).unwrap_or_default()
    }

    fn sort_key(&self, path: &str) -> SortKey {
        SortKey::of(field(self.0, path))
    }

    fn into_json(self) -> Value {
        self.0.clone()
    }
}
