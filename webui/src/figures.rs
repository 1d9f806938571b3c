//! The broker's figures as the overview and the live feed show them, read from the broker at
//! most once a second and shared: however many browsers watch and scripts ask, the queues
//! are walked once (on the blocking pool), and each caller only picks out of the snapshot what
//! it may see (its vhosts, its connections). A page of the feed's queue table is made once per
//! tick for each distinct query and visibility (most UIs show the same default page), sorted on
//! the queues' own figures, with JSON only for the queues on the page.

use crate::api::{message_stats, Management, NodeStatus, QueueRow};
use crate::authorization::Caller;
use crate::listing::ListQuery;
use crate::rates::{HistoryPoint, QueueRates};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warren_delivery::{Queue, VirtualHost};

/// How long a snapshot serves before it is read again.
pub const SNAPSHOT_TTL: Duration = Duration::from_secs(1);

/// One vhost's figures.
#[derive(Debug, Default, Clone)]
struct VhostFigures {
    ready: u64,
    unacked: u64,
    queues: usize,
    exchanges: usize,
    rates: QueueRates,
}

impl VhostFigures {
    fn plus(self, other: &VhostFigures) -> VhostFigures {
        VhostFigures {
            ready: self.ready + other.ready,
            unacked: self.unacked + other.unacked,
            queues: self.queues + other.queues,
            exchanges: self.exchanges + other.exchanges,
            rates: QueueRates {
                counts: self.rates.counts.plus(other.rates.counts),
                rates: self.rates.rates.plus(other.rates.rates),
            },
        }
    }
}

/// One user's clients.
#[derive(Debug, Default, Clone, Copy)]
struct ClientFigures {
    connections: usize,
    channels: usize,
    consumers: usize,
}

impl ClientFigures {
    fn plus(self, other: &ClientFigures) -> ClientFigures {
        ClientFigures {
            connections: self.connections + other.connections,
            channels: self.channels + other.channels,
            consumers: self.consumers + other.consumers,
        }
    }
}

/// What one caller may see of the broker, added up.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    vhosts: VhostFigures,
    clients: ClientFigures,
}

impl Totals {
    /// The overview's `message_stats`, `queue_totals` and `object_totals`, as RabbitMQ's
    /// `/api/overview` has them.
    pub fn overview_fields(&self) -> Value {
        let (v, c) = (&self.vhosts, &self.clients);
        json!({
            "message_stats": message_stats(&v.rates),
            "queue_totals": { "messages": v.ready + v.unacked, "messages_ready": v.ready, "messages_unacknowledged": v.unacked },
            "object_totals": {
                "connections": c.connections,
                "channels": c.channels,
                "consumers": c.consumers,
                "exchanges": v.exchanges,
                "queues": v.queues,
            },
        })
    }
}

/// The vhosts a caller sees: what its pages are told apart by.
type Visible = BTreeSet<String>;

/// The broker's figures at one moment.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// When it was read (ms since the epoch).
    pub at_ms: u64,
    taken: Option<Instant>,
    by_vhost: HashMap<String, VhostFigures>,
    by_user: HashMap<String, ClientFigures>,
    nodes: Vec<NodeStatus>,
    /// Every queue with its vhost, if a subscriber asked for the queue table.
    queues: Option<Vec<(Arc<VirtualHost>, Arc<Queue>)>>,
    /// The pages made from them, by what they show and to whom.
    pages: Mutex<HashMap<(Visible, ListQuery), Value>>,
}

/// The latest snapshot, read again at most once per [`SNAPSHOT_TTL`].
#[derive(Debug, Default)]
pub struct Figures {
    latest: tokio::sync::Mutex<Arc<Snapshot>>,
}

impl Figures {
    /// A snapshot at most [`SNAPSHOT_TTL`] old (with every queue if `with_queues`): the one
    /// there is, or a new one read by the first caller while the others wait for it.
    pub async fn current(&self, api: &Management, with_queues: bool) -> Arc<Snapshot> {
        let mut latest = self.latest.lock().await;
        let fresh = latest.taken.is_some_and(|taken| taken.elapsed() < SNAPSHOT_TTL);
        if fresh && (!with_queues || latest.queues.is_some()) {
            return Arc::clone(&latest);
        }
        let api = api.clone();
        let read = tokio::task::spawn_blocking(move || Snapshot::read(&api, with_queues)).await;
        if let Ok(snapshot) = read {
            *latest = Arc::new(snapshot);
        }
        Arc::clone(&latest)
    }
}

impl Snapshot {
    fn read(api: &Management, with_queues: bool) -> Self {
        let broker = api.broker();
        let rates = api.rates();
        let mut by_vhost: HashMap<String, VhostFigures> = HashMap::new();
        let mut queues = with_queues.then(Vec::new);
        for vhost in broker.vhosts() {
            let figures = by_vhost.entry(vhost.name().to_string()).or_default();
            figures.exchanges = vhost.exchanges().len();
            for queue in vhost.queues() {
                let one = VhostFigures {
                    ready: u64::from(queue.message_count()),
                    unacked: u64::from(queue.unacked_count()),
                    queues: 1,
                    exchanges: 0,
                    rates: rates.queue(vhost.name(), queue.name()),
                };
                *figures = std::mem::take(figures).plus(&one);
                if let Some(queues) = &mut queues {
                    queues.push((Arc::clone(&vhost), queue));
                }
            }
        }
        let mut by_user: HashMap<String, ClientFigures> = HashMap::new();
        for info in broker.connections().all() {
            let channels = info.channels();
            let consumers = channels.iter().map(|(_, session)| session.consumers().len()).sum();
            let one = ClientFigures { connections: 1, channels: channels.len(), consumers };
            let figures = by_user.entry(info.handshake().user.unwrap_or_default()).or_default();
            *figures = figures.plus(&one);
        }
        Snapshot {
            at_ms: warren_delivery::clock::now_ms(),
            taken: Some(Instant::now()),
            by_vhost,
            by_user,
            nodes: api.cluster_nodes(),
            queues,
            pages: Mutex::default(),
        }
    }

    /// The vhosts `caller` sees.
    fn visible_vhosts(&self, api: &Management, caller: &Caller) -> Visible {
        let broker = api.broker();
        self.by_vhost.keys().filter(|name| caller.may_see_vhost(broker, name)).cloned().collect()
    }

    /// What `caller` may see, added up: its vhosts' figures, its connections (everything for
    /// a monitor).
    pub fn totals(&self, api: &Management, caller: &Caller) -> Totals {
        let visible = self.visible_vhosts(api, caller);
        let vhosts = self.by_vhost.iter().filter(|(name, _)| visible.contains(*name)).map(|(_, figures)| figures);
        let clients = self.by_user.iter().filter(|(user, _)| caller.sees_connection_of(user)).map(|(_, c)| c);
        Totals {
            vhosts: vhosts.fold(VhostFigures::default(), VhostFigures::plus),
            clients: clients.fold(ClientFigures::default(), ClientFigures::plus),
        }
    }

    /// The feed's overview for `caller`, with the cluster's nodes for a monitor.
    pub fn feed_overview(&self, api: &Management, caller: &Caller) -> Value {
        let Totals { vhosts, clients } = self.totals(api, caller);
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

    /// The page of the queue table `table` asks for, of the queues `caller` sees: made once
    /// per snapshot for each query and visibility.
    pub fn queue_table(&self, api: &Management, caller: &Caller, table: &ListQuery) -> Value {
        let key = (self.visible_vhosts(api, caller), table.clone());
        if let Some(page) = self.pages.lock().get(&key) {
            return page.clone();
        }
        let shared = Arc::new(api.clone());
        let all = self.queues.as_deref().unwrap_or_default();
        let rows: Vec<QueueRow> = all
            .iter()
            .filter(|(vhost, _)| key.0.contains(vhost.name()))
            .map(|(vhost, queue)| QueueRow::new(Arc::clone(&shared), Arc::clone(vhost), Arc::clone(queue)))
            .collect();
        let page = table.apply_to_live_table(rows).unwrap_or_else(|error| json!({ "error": error.reason() }));
        self.pages.lock().insert(key, page.clone());
        page
    }
}
